// Faults of the tcp backend: a member that closes its connections, a process killed in the
// middle of a large allreduce, a member that never calls. The survivors' error names the
// member (its rank in the set and the job, its host), is PEER_FAILURE when a connection ended
// (so it did not wait for the timeout, which is long there), DEADLINE_EXCEEDED when a member
// went silent, and is sticky. HangBound (tests/harness/hang_bound.h) only catches a hang.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "tests/collectives/shm_file_store.h"
#include "tests/collectives/tcp_ranks.h"
#include "tests/harness/hang_bound.h"

using namespace hora;
using namespace hora::testing;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kLong = std::chrono::milliseconds(60000);  // only a connection's end is quick

bool Has(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

Status BigAllreduce(Communicator& comm) {
  std::vector<float> buf(16 << 20, 1.0f);  // 64 MiB: many pieces in flight
  return comm.Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
}

}  // namespace

TEST_CASE("tcp fault: a member that closes its connections -> PEER_FAILURE naming it, sticky",
          "[tcp][fault]") {
  const int which = GENERATE(0, 1);
  CAPTURE(which);
  std::atomic<bool> gone{false};
  std::vector<Status> got(3), again(3);
  const TcpOptions options = which == 0 ? TcpOptions() : TinyPieces();
  auto failures = RunRanksWith(
      3, TcpFactory(options),
      [&](Communicator& comm) -> std::string {
        RANK_OK(comm.Barrier());
        if (comm.rank() == 1) {
          gone.store(true);
          return "";  // its communicator is destroyed (its sockets closed) when this returns
        }
        while (!gone.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        got[comm.rank()] = BigAllreduce(comm);
        again[comm.rank()] = comm.Barrier();
        return "";
      },
      kLong);
  REQUIRE(JoinFailures(failures) == "");
  for (int r : {0, 2}) {
    INFO("member " << r << ": " << got[r].ToString());
    CHECK(got[r].code() == Code::kPeerFailure);
    CHECK(again[r].message() == got[r].message());
  }
  // Member 2 receives from member 1 (its left in the ring): it sees member 1's end itself.
  CHECK(Has(got[2], "member 1 (rank 1 on host host1)"));
}

TEST_CASE("tcp fault: a process killed mid-transfer -> PEER_FAILURE naming it", "[tcp][fault]") {
  char tmpl[] = "/tmp/hora_tcp_fault_XXXXXX";
  REQUIRE(mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Member 1: join, one barrier, then die without cleanup while the allreduce runs.
    FileStore store(dir);
    auto comm = CreateTcpCommunicator(TcpTestConfig(1, 2, &store, kLong), TinyPieces());
    if (!comm.ok() || !comm.value()->Barrier().ok()) _exit(3);
    std::thread killer([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      raise(SIGKILL);
    });
    for (;;) (void)BigAllreduce(*comm.value());
  }
  FileStore store(dir);
  Status barrier, result;
  const auto start = Clock::now();
  {
    auto comm = CreateTcpCommunicator(TcpTestConfig(0, 2, &store, kLong), TinyPieces());
    REQUIRE(comm.ok());
    barrier = comm.value()->Barrier();
    for (int i = 0; i < 1000 && result.ok(); ++i) result = BigAllreduce(*comm.value());
  }
  const auto took = Clock::now() - start;
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  std::system(("rm -rf " + dir).c_str());
  CHECK(WIFSIGNALED(wstatus));
  CHECK(barrier.ok());
  INFO(result.ToString());
  CHECK(result.code() == Code::kPeerFailure);
  CHECK(Has(result, "member 1 (rank 1 on host host1)"));
  CHECK(took < HangBound(kLong));
}

TEST_CASE("tcp fault: a member that never calls -> DEADLINE_EXCEEDED naming it", "[tcp][fault]") {
  constexpr auto kShort = std::chrono::milliseconds(1000);
  std::atomic<bool> done{false};
  Status got;
  auto failures = RunRanksWith(
      2, TcpFactory(TcpOptions()),
      [&](Communicator& comm) -> std::string {
        RANK_OK(comm.Barrier());
        if (comm.rank() == 1) {
          while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          return "";
        }
        got = BigAllreduce(comm);
        done.store(true);
        return "";
      },
      kShort);
  REQUIRE(JoinFailures(failures) == "");
  INFO(got.ToString());
  CHECK(got.code() == Code::kDeadlineExceeded);
  CHECK(Has(got, "member 1 (rank 1 on host host1)"));
}

TEST_CASE("tcp fault: Abort from another thread ends a call in progress with its reason",
          "[tcp][fault]") {
  Status got;
  auto failures = RunRanksWith(
      2, TcpFactory(TcpOptions()),
      [&](Communicator& comm) -> std::string {
        RANK_OK(comm.Barrier());
        if (comm.rank() == 1) return "";  // leaves: member 0 would see PEER_FAILURE
        comm.Abort(PeerFailure("the coordinator lost rank 7"));
        got = BigAllreduce(comm);
        return "";
      },
      kLong);
  REQUIRE(JoinFailures(failures) == "");
  CHECK(got.code() == Code::kPeerFailure);
  CHECK(got.message() == "the coordinator lost rank 7");
}
