#include "runtime/completion_queue.h"

#include <algorithm>
#include <chrono>

#include "common/mutex.h"

namespace hora {

CompletionQueue::CompletionQueue() {
  thread_ = std::thread([this] { Loop(); });
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
  std::vector<Item> items;
  auto sleep = std::chrono::microseconds(0);
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (items.empty()) {
        cv_.Wait(&mu_, [&] {
          mu_.AssertHeld();
          return stop_ || !incoming_.empty();
        });
        if (incoming_.empty()) return;  // stopped, nothing outstanding
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
    } else {
      // Spin a few rounds, then back off to at most 1 ms per poll.
      sleep = std::min<std::chrono::microseconds>(std::chrono::microseconds(1000),
                                                  sleep * 2 + std::chrono::microseconds(1));
    }
  }
}

}  // namespace hora
