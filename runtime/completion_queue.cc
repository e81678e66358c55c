#include "runtime/completion_queue.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/mutex.h"
#include "common/thread_name.h"

namespace hora {
namespace {

// How long the thread polls without sleeping once it has Works outstanding.
constexpr auto kSpin = std::chrono::microseconds(200);

}  // namespace

CompletionQueue::CompletionQueue() {
  thread_ = std::thread([this] {
    SetThreadName("hora-complete");
    Loop();
  });
}

CompletionQueue::~CompletionQueue() { Stop(); }

void CompletionQueue::Add(std::unique_ptr<Work> work, Done done) {
  {
    MutexLock lock(&mu_);
    incoming_.push_back(Item{std::move(work), std::move(done)});
  }
  cv_.NotifyAll();
}

void CompletionQueue::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void CompletionQueue::Loop() {
  // A timed wait of a few microseconds would otherwise sleep the default 50 us of slack.
  prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
  std::vector<Item> items;
  auto sleep = std::chrono::microseconds(0);
  auto waiting_since = std::chrono::steady_clock::now();  // since the last Work finished
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (items.empty()) {
        cv_.Wait(&mu_, [&] {
          mu_.AssertHeld();
          return stop_ || !incoming_.empty();
        });
        if (incoming_.empty()) return;  // stopped, nothing outstanding
        sleep = std::chrono::microseconds(0);
        waiting_since = std::chrono::steady_clock::now();
      } else if (sleep.count() > 0) {
        cv_.WaitFor(&mu_, sleep, [&] {
          mu_.AssertHeld();
          return !incoming_.empty();
        });
      }
      for (Item& i : incoming_) items.push_back(std::move(i));
      incoming_.clear();
    }
    size_t finished = 0;
    for (auto it = items.begin(); it != items.end();) {
      Status status;
      if (!it->work->Test(&status)) {
        ++it;
        continue;
      }
      it->done(std::move(status));
      it = items.erase(it);
      ++finished;
    }
    if (finished > 0) {
      sleep = std::chrono::microseconds(0);
      waiting_since = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - waiting_since <= kSpin) {
      std::this_thread::yield();  // a small bucket's Work usually ends within the spin
    } else {
      // Then back off to at most 1 ms per poll.
      sleep = std::min<std::chrono::microseconds>(std::chrono::microseconds(1000),
                                                  sleep * 2 + std::chrono::microseconds(1));
    }
  }
}

}  // namespace hora
