#include "collectives/tcp/lane_pool.h"

namespace hora {

LanePool::LanePool(int threads) {
  for (int i = 0; i < threads && i < 64; ++i) threads_.emplace_back([this, i] { Loop(i); });
}

LanePool::~LanePool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void LanePool::Loop(int index) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    wake_.wait(lock, [&] { return stop_ || job_[index] != nullptr; });
    if (job_[index] == nullptr) return;  // stop_, nothing posted
    const std::function<Status()>* job = job_[index];
    lock.unlock();
    Status s = (*job)();
    lock.lock();
    result_[index] = std::move(s);
    job_[index] = nullptr;
    if (--pending_ == 0) done_.notify_all();
  }
}

Status LanePool::RunAll(const std::vector<std::function<Status()>>& jobs) {
  if (jobs.empty()) return Status::Ok();
  const int posted = static_cast<int>(jobs.size()) - 1;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < posted && i < threads(); ++i) {
      job_[i] = &jobs[static_cast<size_t>(i) + 1];
      result_[i] = Status::Ok();
      ++pending_;
    }
  }
  wake_.notify_all();
  Status first = jobs[0]();
  // Jobs beyond the pool's threads (none when callers respect threads()) run here too.
  for (size_t i = static_cast<size_t>(threads()) + 1; i < jobs.size(); ++i) {
    Status s = jobs[i]();
    if (first.ok()) first = std::move(s);
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return pending_ == 0; });
  for (int i = 0; i < posted && i < threads(); ++i) {
    if (first.ok() && !result_[i].ok()) first = result_[i];
  }
  return first;
}

}  // namespace hora
