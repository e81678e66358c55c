// The completion thread: every Work's function runs once, with the Work's status, whether
// the Work ends at once, within the thread's spin or after it has begun to sleep; Stop waits
// for outstanding Works; a Work added while the thread sleeps is not left waiting.
#include "runtime/completion_queue.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

namespace hora {
namespace {

// Done at a fixed time; its status names it.
class TimedWork : public Work {
 public:
  TimedWork(int id, std::chrono::microseconds after)
      : id_(id), at_(std::chrono::steady_clock::now() + after) {}
  bool Test(Status* status) override {
    if (std::chrono::steady_clock::now() < at_) return false;
    *status = id_ % 3 == 0 ? Internal("work " + std::to_string(id_)) : Status::Ok();
    return true;
  }

 private:
  const int id_;
  const std::chrono::steady_clock::time_point at_;
};

TEST_CASE("completion queue: every function runs once with its Work's status") {
  std::mutex mu;
  std::vector<std::string> statuses(60);
  std::atomic<int> calls{0};
  {
    CompletionQueue q;
    // Works ending at once, within 200 us (the spin), and after 2-8 ms (the sleeping polls).
    for (int i = 0; i < 60; ++i) {
      const auto after = i < 20   ? std::chrono::microseconds(0)
                         : i < 40 ? std::chrono::microseconds(100)
                                  : std::chrono::microseconds(2000 + (59 - i) * 300);
      q.Add(std::make_unique<TimedWork>(i, after), [&, i](Status s) {
        std::lock_guard<std::mutex> lock(mu);
        statuses[i] = s.ok() ? "ok" : s.message();
        ++calls;
      });
    }
    q.Stop();  // waits for the outstanding Works
    CHECK(calls.load() == 60);
  }
  for (int i = 0; i < 60; ++i) {
    INFO("work " << i);
    CHECK(statuses[i] == (i % 3 == 0 ? "work " + std::to_string(i) : std::string("ok")));
  }
}

TEST_CASE("completion queue: a Work added while the thread sleeps is finished") {
  std::atomic<int> calls{0};
  CompletionQueue q;
  q.Add(std::make_unique<TimedWork>(1, std::chrono::milliseconds(50)), [&](Status) { ++calls; });
  std::this_thread::sleep_for(std::chrono::milliseconds(10));  // the thread now sleeps
  q.Add(std::make_unique<TimedWork>(2, std::chrono::microseconds(0)), [&](Status) { ++calls; });
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (calls.load() < 2 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(calls.load() == 2);
}

}  // namespace
}  // namespace hora
