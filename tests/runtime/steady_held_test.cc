// What the steady path holds (an offered instance waiting for its peers, not in the engine's
// queue): a name enqueued again is refused as the queue refuses it, and what is still held at
// shutdown fails with the shutdown's error. Engines as threads on one host (shm).
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "tests/harness/hang_bound.h"
#include "tests/runtime/engine_threads.h"
#include "tests/runtime/steady_harness.h"

namespace hora {
namespace {

using testing::CheckEveryRank;
using testing::HangBound;
using testing::OneHost;
using testing::RunRanks;
using testing::WaitBound;

constexpr int kWarm = SteadyOptions{}.warmup + 4;

// One blocking allreduce of 4 floats of value r + 1.
std::string Step(Engine& e, int r, const std::string& name) {
  std::vector<float> buf(4, static_cast<float>(r + 1));
  auto h = testing::Allreduce(e, name, &buf, ReduceOp::kSum);
  if (!h.ok()) return "enqueue: " + h.status().ToString();
  Status s = e.Wait(h.value(), WaitBound());
  (void)e.Release(h.value());
  if (!s.ok()) return name + ": " + s.ToString();
  if (buf != std::vector<float>(4, 3.0f)) return name + ": wrong result";
  return "";
}

// Waits (bounded) until flag is set.
bool Await(const std::atomic<bool>& flag) {
  const auto until = std::chrono::steady_clock::now() + HangBound(std::chrono::seconds(20));
  while (!flag.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return flag.load();
}

TEST_CASE("steady path: a name enqueued again while its instance is held is refused", "[steady]") {
  std::atomic<bool> refused{false};
  auto errors = RunRanks(
      2,
      [&](int r, Engine& e) -> std::string {
        for (int i = 0; i < kWarm; ++i) {
          if (auto err = Step(e, r, "h"); !err.empty()) return "warm: " + err;
        }
        if (e.Steady(0).value().fast == 0) return "the fast path was not taken";
        if (r == 1) {
          if (!Await(refused)) return "rank 0 never enqueued twice";
          if (auto err = Step(e, r, "h"); !err.empty()) return err;
          return Step(e, r, "h");
        }
        std::vector<float> first(4, 1.0f), second(4, 1.0f);
        auto h = testing::Allreduce(e, "h", &first, ReduceOp::kSum);
        if (!h.ok()) return "enqueue: " + h.status().ToString();
        auto again = testing::Allreduce(e, "h", &second, ReduceOp::kSum);
        refused = true;
        if (again.ok() || again.status().code() != Code::kAlreadyExists ||
            again.status().message().find("already in flight") == std::string::npos) {
          return "second enqueue: " +
                 (again.ok() ? std::string("accepted") : again.status().ToString());
        }
        Status s = e.Wait(h.value(), WaitBound());
        (void)e.Release(h.value());
        if (!s.ok()) return "first: " + s.ToString();
        if (first != std::vector<float>(4, 3.0f)) return "first: wrong result";
        return Step(e, r, "h");  // the name is free again
      },
      [&](Options* o) { OneHost(o, "auto"); });
  CheckEveryRank(errors);
}

TEST_CASE("steady path: an instance still held at shutdown fails with the shutdown's error",
          "[steady]") {
  std::atomic<bool> done{false};
  auto errors = RunRanks(
      2,
      [&](int r, Engine& e) -> std::string {
        for (int i = 0; i < kWarm; ++i) {
          if (auto err = Step(e, r, "s"); !err.empty()) return "warm: " + err;
        }
        if (e.Steady(0).value().fast == 0) return "the fast path was not taken";
        if (r == 1) {
          // Never offers "s" again; stays up until rank 0 has shut down.
          if (!Await(done)) return "rank 0 never finished";
          return "";
        }
        std::vector<float> buf(4, 1.0f);
        auto h = testing::Allreduce(e, "s", &buf, ReduceOp::kSum);
        if (!h.ok()) return "enqueue: " + h.status().ToString();
        (void)e.Shutdown();
        Status s = e.Wait(h.value(), WaitBound());
        (void)e.Release(h.value());
        done = true;
        if (s.code() != Code::kAborted || s.message().find("shut down") == std::string::npos) {
          return "expected the shutdown's error, got " + s.ToString();
        }
        return "";
      },
      [&](Options* o) {
        OneHost(o, "auto");
        o->steady_patience_ms = 600 * 1000;  // held, not fallen back, when rank 0 shuts down
        o->heartbeat_timeout_s = 3;  // how long rank 0's shutdown waits for rank 1's goodbye
      });
  CheckEveryRank(errors);
}

}  // namespace
}  // namespace hora
