// CheckComponentDirs / CheckMpiComponents (collectives/mpi/mpi_components.h): a libmpi that
// finds no components is refused with a message naming the path and the way out, before
// MPI_Init_thread would abort the process.
#include "collectives/mpi/mpi_components.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <string>

namespace hora {
namespace {

// A fresh directory under $TEST_TMPDIR (Bazel) or /tmp.
std::string MakeDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string templ = std::string(base ? base : "/tmp") + "/" + name + ".XXXXXX";
  REQUIRE(mkdtemp(&templ[0]) != nullptr);
  return templ;
}

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_CASE("A directory without mca_*.so is refused, naming the path and the way out") {
  const std::string empty = MakeDir("empty");
  const std::string other = MakeDir("other");
  Touch(other + "/libfoo.so");
  Touch(other + "/mca_btl_tcp.la");  // not a shared object
  const std::string path = empty + ":" + other + ":/nonexistent/openmpi3";
  Status s = CheckComponentDirs(path, "Open MPI v4.1.4");
  REQUIRE(s.code() == Code::kFailedPrecondition);
  CHECK(Contains(s.message(), "mca_base_component_path=" + path));
  CHECK(Contains(s.message(), "Open MPI v4.1.4"));
  CHECK(Contains(s.message(), "OPAL_PREFIX"));
  CHECK(Contains(s.message(), "HORA_CPU_OPERATIONS"));
  CHECK(CheckComponentDirs("", "MPI").code() == Code::kFailedPrecondition);
}

TEST_CASE("Any directory of the path holding a component is enough") {
  const std::string empty = MakeDir("empty");
  const std::string comps = MakeDir("comps");
  Touch(comps + "/mca_btl_tcp.so");
  CHECK(CheckComponentDirs(empty + ":" + comps, "MPI").ok());
  CHECK(CheckComponentDirs(comps, "MPI").ok());
  CHECK(CheckComponentDirs("::" + comps + ":", "MPI").ok());
}

TEST_CASE("This machine's Open MPI finds its components") {
  // tools/setup.sh installs Open MPI: its libmpi must pass, before and without MPI_Init.
  Status s = CheckMpiComponents();
  INFO(s.message());
  CHECK(s.ok());
}

}  // namespace
}  // namespace hora
