// The MPI backend's process sets, bounded waits and launcher checks, ranks as real processes
// under mpirun: communicators for subsets (MPI_Comm_create_group) with collectives and
// send/recv inside them; a collective that only one rank enters ends with DEADLINE_EXCEEDED
// naming the op and bytes, within the hang bound; Abort ends a blocked receive; the launcher
// check refuses environments that are not an MPI job, naming the variable.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "collectives/mpi/mpi_environment.h"
#include "tests/collectives/mpi_cases.h"
#include "tests/harness/hang_bound.h"

namespace hora {
namespace testing {
namespace {

bool Has(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// Allreduce of member ranks + 1 and a ring send/recv inside the set, checked against the
// members list.
std::string UseSet(Communicator& c, const std::vector<int>& members) {
  if (c.size() != static_cast<int>(members.size())) return "size " + std::to_string(c.size());
  std::vector<int64_t> x(1001, WorldRank() + 1);
  Status s = c.Allreduce(x.data(), x.size(), DataType::kInt64, ReduceOp::kSum);
  if (!s.ok()) return "allreduce: " + s.ToString();
  int64_t want = 0;
  for (int m : members) want += m + 1;
  for (int64_t v : x) {
    if (v != want)
      return "allreduce value " + std::to_string(v) + ", expected " + std::to_string(want);
  }
  if (c.size() == 1) return "";
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  int64_t out = WorldRank(), in = -1;
  s = c.rank() % 2 == 0 ? c.Send(&out, 8, next, 1) : c.Recv(&in, 8, prev, 1);
  if (s.ok()) s = c.rank() % 2 == 0 ? c.Recv(&in, 8, prev, 1) : c.Send(&out, 8, next, 1);
  if (!s.ok()) return "send/recv: " + s.ToString();
  if (in != members[prev])
    return "received " + std::to_string(in) + " from set rank " + std::to_string(prev);
  return "";
}

MPI_CASE("process sets: subsets and a set of every rank, built by their members only") {
  const int n = WorldSize();
  std::vector<std::vector<int>> sets = {{0, n - 1}, {n - 1}, {}};
  for (int r = 0; r < n; ++r) sets[2].push_back(r);  // every rank, but not set 0
  if (n >= 3) sets.push_back({1, 2});
  int id = 11;
  for (const auto& members : sets) {
    BackendConfig config = ConfigOf(id, members);
    const int set = id++;
    if (config.rank < 0) continue;  // not a member: builds nothing, waits for nothing
    auto comm = CreateCommunicator("mpi", "HORA_CPU_OPERATIONS", config);
    if (!comm.ok()) return "set " + std::to_string(set) + ": " + comm.status().ToString();
    std::string e = UseSet(*comm.value(), members);
    if (!e.empty()) return "set " + std::to_string(set) + ": " + e;
  }
  return "";
}

MPI_CASE("a collective entered by one rank only times out naming the op and bytes") {
  // Rank 0's communicator has a short timeout; the others join after rank 0 gave up (their
  // communicators wait longer), so the abandoned allreduce completes and MPI ends clean.
  const auto timeout = std::chrono::milliseconds(WorldRank() == 0 ? 700 : 60000);
  std::vector<int> everyone;
  for (int r = 0; r < WorldSize(); ++r) everyone.push_back(r);
  auto comm = CreateCommunicator("mpi", "HORA_CPU_OPERATIONS", ConfigOf(21, everyone, timeout));
  if (!comm.ok()) return comm.status().ToString();
  // Rank 0's allreduce is abandoned inside MPI and completes later, writing its buffer
  // (mpi_communicator.h): the buffer must outlive this case, so it is never freed.
  static std::vector<float>* kept = new std::vector<float>(256, 1.0f);
  std::vector<float>& x = *kept;
  std::string error;
  if (WorldRank() == 0) {
    const auto start = std::chrono::steady_clock::now();
    Status s = comm.value()->Allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
    const auto took = std::chrono::steady_clock::now() - start;
    std::printf("DETECTION mpi allreduce timeout: %.0f ms (deadline 700 ms)\n",
                std::chrono::duration<double, std::milli>(took).count());
    if (s.code() != Code::kDeadlineExceeded)
      error = "expected DEADLINE_EXCEEDED, got " + s.ToString();
    else if (!Has(s, "mpi allreduce of 1024 bytes"))
      error = "message: " + s.message();
    if (took < timeout) error += " ended before its deadline";
    if (took > HangBound(timeout)) error += " ended past the hang bound";
    Status later = comm.value()->Barrier();
    if (later.code() != Code::kDeadlineExceeded) error += "; not sticky: " + later.ToString();
    for (int r = 1; r < WorldSize(); ++r) MPI_Send(&r, 1, MPI_INT, r, 77, MPI_COMM_WORLD);
  } else {
    int token = 0;
    MPI_Recv(&token, 1, MPI_INT, 0, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    Status s = comm.value()->Allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
    if (!s.ok()) error = "the late ranks' allreduce: " + s.ToString();
  }
  return error;
}

MPI_CASE("Abort ends a blocked receive with its reason, and every later call") {
  std::vector<int> everyone;
  for (int r = 0; r < WorldSize(); ++r) everyone.push_back(r);
  auto made = CreateCommunicator("mpi", "HORA_CPU_OPERATIONS", ConfigOf(22, everyone));
  if (!made.ok()) return made.status().ToString();
  Communicator& c = *made.value();
  std::thread aborter([&c] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    c.Abort(PeerFailure("rank 9 died (test)"));
  });
  uint8_t b[64];
  const auto start = std::chrono::steady_clock::now();
  Status s = c.Recv(b, sizeof(b), (c.rank() + 1) % c.size(), 5);  // nobody sends
  const auto took = std::chrono::steady_clock::now() - start;
  aborter.join();
  if (s.code() != Code::kPeerFailure || !Has(s, "rank 9 died")) return "recv: " + s.ToString();
  if (took > HangBound(std::chrono::milliseconds(300))) return "the abort took too long";
  Status later = c.Allreduce(b, 1, DataType::kUint8, ReduceOp::kSum);
  if (!Has(later, "rank 9 died")) return "later call: " + later.ToString();
  return "";
}

const char* Lookup(const std::vector<std::pair<const char*, const char*>>& table,
                   const char* name) {
  for (const auto& kv : table) {
    if (std::string(kv.first) == name) return kv.second;
  }
  return nullptr;
}

MPI_CASE("launcher check: refuses what is not this MPI job, naming the variable") {
  using Table = std::vector<std::pair<const char*, const char*>>;
  auto check = [](const Table& t, int rank, std::vector<int> ranks, int job) {
    return CheckMpiLauncher([&t](const char* n) { return Lookup(t, n); }, rank, ranks, job);
  };
  Status none = check({}, 0, {0, 1}, 2);
  if (none.code() != Code::kFailedPrecondition || !Has(none, "OMPI_COMM_WORLD_SIZE is not set")) {
    return "no launcher: " + none.ToString();
  }
  Table two = {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"}};
  if (!check(two, 1, {0, 1}, 2).ok()) return "a consistent job was refused";
  if (!Has(check(two, 0, {0, 1}, 2), "differs from Hora's rank 0")) return "rank mismatch passed";
  if (!Has(check(two, 1, {0, 1, 2}, 3), "has 2 ranks")) return "size mismatch passed";
  if (!Has(check(two, 1, {1, 4}, 0), "rank 4 is outside")) return "a set past the job passed";
  Table bad = {{"OMPI_COMM_WORLD_SIZE", "x"}, {"OMPI_COMM_WORLD_RANK", "0"}};
  if (!Has(check(bad, 0, {0}, 1), "OMPI_COMM_WORLD_SIZE='x'")) return "a bad size passed";
  return "";
}

}  // namespace
}  // namespace testing
}  // namespace hora
