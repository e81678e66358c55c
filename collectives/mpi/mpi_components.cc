#include "collectives/mpi/mpi_components.h"

#include <dirent.h>
#include <mpi.h>

#include <cstring>
#include <sstream>
#include <vector>

namespace hora {
namespace {

constexpr const char kComponentPathVar[] = "mca_base_component_path";

bool HoldsComponent(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (!found) {
    const dirent* e = readdir(d);
    if (e == nullptr) break;
    const size_t n = std::strlen(e->d_name);
    found = std::strncmp(e->d_name, "mca_", 4) == 0 && n > 7 &&
            std::strcmp(e->d_name + n - 3, ".so") == 0;
  }
  closedir(d);
  return found;
}

std::string LibraryVersion() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "this MPI library";
  std::string v(text, len);
  const size_t end = v.find_first_of(",\n");
  return end == std::string::npos ? v : v.substr(0, end);
}

// mca_base_component_path through the MPI tool interface, or "" when it does not answer.
std::string ComponentPath() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return "";
  std::string path;
  int index = -1, count = 0;
  MPI_T_cvar_handle handle;
  if (MPI_T_cvar_get_index(kComponentPathVar, &index) == MPI_SUCCESS &&
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
    // A string cvar reads into a buffer of `count` characters.
    std::vector<char> buf(static_cast<size_t>(count > 0 ? count : 0) + 1, '\0');
    if (count > 0 && MPI_T_cvar_read(handle, buf.data()) == MPI_SUCCESS) path = buf.data();
    MPI_T_cvar_handle_free(&handle);
  }
  MPI_T_finalize();
  return path;
}

}  // namespace

Status CheckComponentDirs(const std::string& component_path, const std::string& library) {
  std::stringstream dirs(component_path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (!dir.empty() && HoldsComponent(dir)) return Status::Ok();
  }
  return FailedPrecondition(
      "mpi: " + library + " finds none of its components (mca_*.so) in " + kComponentPathVar + "=" +
      component_path +
      ": this libmpi loads them from the Open MPI installation it was "
      "built for, so the mpi backend needs that Open MPI on this machine (Debian 12: "
      "openmpi-bin, Open MPI 4.1), or OPAL_PREFIX set to its prefix; otherwise choose another "
      "backend (HORA_CPU_OPERATIONS=auto, gloo or shm)");
}

Status CheckMpiComponents() {
  const std::string path = ComponentPath();
  if (path.empty()) return Status::Ok();
  return CheckComponentDirs(path, LibraryVersion());
}

}  // namespace hora
