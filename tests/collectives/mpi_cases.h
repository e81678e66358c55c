// A small case runner for tests whose ranks are real MPI processes (tests/collectives/mpi_test,
// run under mpirun): each case runs on every rank, returns "" or what was wrong, and counts as
// failed when any rank failed it. The verdicts are combined with raw MPI_Allreduce on
// MPI_COMM_WORLD (MPI itself, not the Hora code under test), and rank 0 prints the
// "N passed, N failed, N skipped" line last (docs/testing.md).
#ifndef HORA_TESTS_COLLECTIVES_MPI_CASES_H_
#define HORA_TESTS_COLLECTIVES_MPI_CASES_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/registry.h"
#include "common/kv_store.h"

namespace hora {
namespace testing {

struct MpiCase {
  std::string name;
  std::function<std::string()> body;
};

// Every case registered so far, in order.
std::vector<MpiCase>& MpiCases();

struct MpiCaseRegistration {
  MpiCaseRegistration(std::string name, std::function<std::string()> body) {
    MpiCases().push_back({std::move(name), std::move(body)});
  }
};

// The world rank and size of this process; valid inside a case.
int WorldRank();
int WorldSize();
// The communicator of every rank, built through the registry as "mpi"; valid inside a case.
Communicator& World();
// A store every rank of this run shares (files in one directory), for process sets.
KvStore& SharedStore();
// A BackendConfig of the given members (world ranks, sorted); rank is this process's index
// among them, or -1 when it is not a member.
BackendConfig ConfigOf(int process_set, const std::vector<int>& members,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(20000));

}  // namespace testing
}  // namespace hora

#define MPI_CASE_CONCAT_(a, b) a##b
#define MPI_CASE_CONCAT(a, b) MPI_CASE_CONCAT_(a, b)
// MPI_CASE("name") { ...; return ""; }
#define MPI_CASE(name)                                                                  \
  static std::string MPI_CASE_CONCAT(mpi_case_fn_, __LINE__)();                         \
  static ::hora::testing::MpiCaseRegistration MPI_CASE_CONCAT(mpi_case_reg_, __LINE__)( \
      name, MPI_CASE_CONCAT(mpi_case_fn_, __LINE__));                                   \
  static std::string MPI_CASE_CONCAT(mpi_case_fn_, __LINE__)()

#endif  // HORA_TESTS_COLLECTIVES_MPI_CASES_H_
