// Faults: a rank that stops or leaves must turn into an error on the others within a bounded
// time (the communicator's timeout; the test allows HangBound of it), never a hang; the error
// is sticky afterwards: later calls return it without waiting on the network again.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo/gloo_communicator.h"
#include "tests/collectives/rank_threads.h"
#include "tests/harness/hang_bound.h"

using namespace hora;
using hora::testing::HangBound;
using hora::testing::JoinFailures;
using hora::testing::RunRanks;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kTimeout = std::chrono::milliseconds(2000);
const auto kBound = HangBound(kTimeout);

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

bool SaysTimeoutOrPeer(const Status& s) {
  const std::string& m = s.message();
  return (s.code() == Code::kDeadlineExceeded && m.find("timed out") != std::string::npos) ||
         (s.code() == Code::kPeerFailure && m.find("peer") != std::string::npos);
}

// Runs the allreduce that must fail on a surviving rank; checks bound, text and stickiness.
std::string ExpectBoundedFailure(Communicator& comm, Code* code) {
  std::vector<float> buf(1 << 20, 1.0f);
  const auto start = Clock::now();
  Status s = comm.Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  const auto took = Clock::now() - start;
  *code = s.code();
  if (s.ok()) return "allreduce succeeded without a peer";
  if (took > kBound) return "error came after " + std::to_string(Ms(took)) + " ms: " + s.ToString();
  if (!SaysTimeoutOrPeer(s)) return "unexpected error: " + s.ToString();
  const auto again_start = Clock::now();
  Status again = comm.Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
  Status barrier = comm.Barrier();
  // A call that went to the network again would wait for the timeout before failing.
  if (Clock::now() - again_start >= kTimeout) return "the sticky error waited on the network";
  if (again.code() != s.code() || again.message() != s.message() || barrier.code() != s.code() ||
      barrier.message() != s.message()) {
    return "error is not sticky: first " + s.ToString() + ", then " + again.ToString() +
           ", barrier " + barrier.ToString();
  }
  return "";
}

}  // namespace

TEST_CASE("fault: a rank that never calls the collective -> bounded error", "[gloo][fault]") {
  std::atomic<int> done{0};
  std::vector<Code> codes(3, Code::kOk);
  auto failures = RunRanks(
      3,
      [&](Communicator& comm) -> std::string {
        if (comm.rank() == 2) {
          // Stalls until the others have given up, then finds the communicator broken fast.
          const auto give_up = Clock::now() + std::chrono::seconds(10);
          while (done.load() < 2 && Clock::now() < give_up) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          }
          float x = 1;
          const auto start = Clock::now();
          Status s = comm.Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum);
          if (s.ok()) return std::string("late rank's allreduce succeeded alone");
          if (Clock::now() - start > kBound) return std::string("late rank's error was slow");
          return std::string();
        }
        std::string f = ExpectBoundedFailure(comm, &codes[comm.rank()]);
        done.fetch_add(1);
        return f;
      },
      kTimeout);
  REQUIRE(JoinFailures(failures) == "");
  // Somebody noticed the timeout first; the other may have seen the closed connection.
  CHECK((codes[0] == Code::kDeadlineExceeded || codes[1] == Code::kDeadlineExceeded));
}

TEST_CASE("fault: a rank that destroys its communicator -> bounded error", "[gloo][fault]") {
  std::vector<Code> codes(3, Code::kOk);
  auto failures = RunRanks(
      3,
      [&](Communicator& comm) -> std::string {
        RANK_OK(comm.Barrier());
        if (comm.rank() == 2) return "";  // leaves: its communicator is destroyed now
        return ExpectBoundedFailure(comm, &codes[comm.rank()]);
      },
      kTimeout);
  REQUIRE(JoinFailures(failures) == "");
}

TEST_CASE("fault: create times out when a rank never shows up", "[gloo][fault]") {
  MemoryStore store;
  GlooConfig config;
  config.rank = 0;
  config.size = 2;
  config.store = &store;
  config.key_prefix = "gloo/lonely/";
  config.timeout = std::chrono::milliseconds(500);
  const auto start = Clock::now();
  auto comm = CreateGlooCommunicator(config);
  const auto took = Clock::now() - start;
  REQUIRE_FALSE(comm.ok());
  CHECK(comm.status().code() == Code::kDeadlineExceeded);
  CHECK_THAT(comm.status().message(), Catch::Contains("gloo/lonely/"));
  CHECK(took < HangBound(config.timeout));
}

TEST_CASE("create rejects a bad config", "[gloo]") {
  GlooConfig config;
  config.rank = 3;
  config.size = 2;
  CHECK(CreateGlooCommunicator(config).status().code() == Code::kInvalidArgument);
  config.rank = 0;
  CHECK(CreateGlooCommunicator(config).status().code() == Code::kInvalidArgument);  // no store
  MemoryStore store;
  config.store = &store;
  config.timeout = std::chrono::milliseconds(0);
  CHECK(CreateGlooCommunicator(config).status().code() == Code::kInvalidArgument);
}

TEST_CASE(
    "a gloo communicator leaves SIGPIPE ignored: a write to a dead peer is an error, "
    "not the death of this process",
    "[gloo][fault]") {
  auto failures = RunRanks(
      2,
      [](Communicator& comm) -> std::string {
        RANK_OK(comm.Barrier());
        return "";
      },
      kTimeout);
  REQUIRE(JoinFailures(failures) == "");
  struct sigaction current {};
  REQUIRE(sigaction(SIGPIPE, nullptr, &current) == 0);
  CHECK(current.sa_handler == SIG_IGN);
}
