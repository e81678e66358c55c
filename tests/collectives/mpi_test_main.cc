// main() of tests/collectives/mpi_test: builds the world communicator through the registry
// (so "mpi" must be built, serve this mpirun job and initialize MPI), runs every MPI_CASE on
// every rank and reports as tests/collectives/mpi_cases.h says.
//   mpirun -np N mpi_test [STORE_DIR]    (STORE_DIR default: $TEST_TMPDIR, else /tmp)
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "tests/collectives/mpi_cases.h"
#include "tests/collectives/shm_file_store.h"

namespace hora {
namespace testing {
namespace {

int g_rank = 0;
int g_size = 1;
Communicator* g_world = nullptr;
KvStore* g_store = nullptr;

int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

}  // namespace

std::vector<MpiCase>& MpiCases() {
  static std::vector<MpiCase> cases;
  return cases;
}

int WorldRank() { return g_rank; }
int WorldSize() { return g_size; }
Communicator& World() { return *g_world; }
KvStore& SharedStore() { return *g_store; }

BackendConfig ConfigOf(int process_set, const std::vector<int>& members,
                       std::chrono::milliseconds timeout) {
  BackendConfig c;
  c.process_set = process_set;
  c.rank = -1;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == g_rank) c.rank = static_cast<int>(i);
    c.global_ranks.push_back(members[i]);
    c.hostnames.push_back("localhost");
  }
  c.store = g_store;
  c.key_prefix = "set/" + std::to_string(process_set) + "/cpu/";
  c.timeout = timeout;
  c.env = [](const char* name) { return std::getenv(name); };  // mpirun's variables
  return c;
}

}  // namespace testing
}  // namespace hora

int main(int argc, char** argv) {
  using namespace hora;
  using namespace hora::testing;
  g_rank = EnvInt("OMPI_COMM_WORLD_RANK");
  g_size = EnvInt("OMPI_COMM_WORLD_SIZE");
  if (g_rank < 0 || g_size < 1) {
    std::printf("mpi_test must run under mpirun (OMPI_COMM_WORLD_RANK/SIZE are not set)\n");
    std::printf("0 passed, 1 failed, 0 skipped\n");
    return 1;
  }
  const char* tmp = std::getenv("TEST_TMPDIR");
  std::string dir = argc > 1 ? argv[1] : (tmp ? tmp : "/tmp");
  FileStore store(dir);
  g_store = &store;
  std::vector<int> everyone;
  for (int r = 0; r < g_size; ++r) everyone.push_back(r);
  auto world = CreateCommunicator("mpi", "HORA_CPU_OPERATIONS", ConfigOf(0, everyone));
  if (!world.ok()) {
    std::printf("rank %d: the world communicator: %s\n", g_rank, world.status().ToString().c_str());
    std::printf("0 passed, 1 failed, 0 skipped\n");
    return 1;
  }
  g_world = world.value().get();
  int passed = 0, failed = 0;
  for (const MpiCase& c : MpiCases()) {
    const std::string error = c.body();
    if (!error.empty())
      std::printf("rank %d: FAILED %s: %s\n", g_rank, c.name.c_str(), error.c_str());
    int mine = error.empty() ? 0 : 1, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0) std::printf("%s %s\n", any ? "FAIL" : "ok  ", c.name.c_str());
    std::fflush(stdout);
    (any ? failed : passed)++;
  }
  world.value().reset();  // the last reference on MPI: finalized at exit
  g_world = nullptr;
  if (g_rank == 0) std::printf("%d passed, %d failed, 0 skipped\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
