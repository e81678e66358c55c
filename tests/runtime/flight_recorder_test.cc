#include "runtime/flight_recorder.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <set>
#include <thread>
#include <vector>

namespace hora {
namespace {

TensorSpec Spec(const std::string& name, int64_t n) {
  TensorSpec s;
  s.name = name;
  s.collective = CollectiveType::kAllreduce;
  s.dtype = DataType::kFloat32;
  s.shape = {n};
  return s;
}

TEST_CASE("flight recorder keeps an operation's times and state") {
  FlightRecorder r(8);
  r.Enqueued(1, Spec("grad.7", 3), 100);
  r.Enqueued(2, Spec("grad.8", 1), 110);
  r.Started(1, 120);
  r.Ended(1, true, 130);
  r.Ended(2, false, 140);
  r.Ended(2, true, 150);  // the first end stays
  auto s = r.Snapshot();
  REQUIRE(s.size() == 2);
  CHECK(s[0].name == "grad.7");
  CHECK(s[0].bytes == 12);
  CHECK(s[0].enqueue_us == 100);
  CHECK(s[0].start_us == 120);
  CHECK(s[0].end_us == 130);
  CHECK(s[0].state == FlightState::kDone);
  CHECK(s[1].state == FlightState::kFailed);
  CHECK(s[1].start_us == 0);
  CHECK(s[1].end_us == 140);
}

TEST_CASE("flight recorder is bounded and wraps, keeping the newest") {
  FlightRecorder r(4);
  for (int64_t h = 1; h <= 10; ++h) r.Enqueued(h, Spec("t" + std::to_string(h), 1), h);
  r.Ended(3, true, 99);  // overwritten by handle 7: ignored
  auto s = r.Snapshot();
  REQUIRE(s.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    CHECK(s[i].handle == static_cast<int64_t>(7 + i));
    CHECK(s[i].name == "t" + std::to_string(7 + i));
    CHECK(s[i].state == FlightState::kPending);
  }
  // An old handle never takes a slot back from a newer one.
  r.Enqueued(5, Spec("late", 1), 1);
  CHECK(r.Snapshot()[2].name == "t9");
}

TEST_CASE("flight recorder truncates long names and can be off") {
  FlightRecorder r(2);
  r.Enqueued(1, Spec(std::string(500, 'x'), 1), 1);
  CHECK(r.Snapshot()[0].name.size() == FlightRecorder::kNameBytes);
  FlightRecorder off(0);
  off.Enqueued(1, Spec("a", 1), 1);
  off.Ended(1, true, 2);
  CHECK(off.Snapshot().empty());
}

TEST_CASE("flight recorder takes concurrent writers and a reader") {
  constexpr int kThreads = 4;
  constexpr int64_t kPerThread = 5000;
  FlightRecorder r(64);
  std::vector<std::thread> threads;
  std::atomic<bool> stop{false};
  std::atomic<int64_t> torn{0}, seen{0};  // Catch2's macros are for the test's thread only
  std::thread reader([&] {
    while (!stop.load()) {
      for (const FlightRecord& f : r.Snapshot()) {
        // Never torn: the name always belongs to the handle.
        if (f.name != "op" + std::to_string(f.handle) || f.bytes != 4) ++torn;
        ++seen;
      }
    }
  });
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&r, t] {
      for (int64_t i = 0; i < kPerThread; ++i) {
        const int64_t h = 1 + t + i * kThreads;  // the threads interleave handles
        r.Enqueued(h, Spec("op" + std::to_string(h), 1), h);
        r.Started(h, h + 1);
        r.Ended(h, true, h + 2);
      }
    });
  }
  for (auto& t : threads) t.join();
  stop = true;
  reader.join();
  CHECK(torn.load() == 0);
  auto s = r.Snapshot();
  REQUIRE(s.size() == 64);
  std::set<int64_t> handles;
  for (const FlightRecord& f : s) {
    handles.insert(f.handle);
    CHECK(f.state == FlightState::kDone);
  }
  CHECK(*handles.rbegin() == kThreads * kPerThread);
  CHECK(*handles.begin() == kThreads * kPerThread - 63);
}

}  // namespace
}  // namespace hora
