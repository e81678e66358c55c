#include "runtime/handle_table.h"

#include <sched.h>

#include <algorithm>

#include "common/mutex.h"

namespace hora {

int64_t HandleTable::Create(int yield_us) {
  MutexLock lock(&mu_);
  int64_t h = next_++;
  Entry e;
  e.yield_us = yield_us;
  spare_.Insert(&entries_, h, std::move(e));
  return h;
}

void HandleTable::Complete(int64_t handle, Status status) {
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end() || it->second.done) return;
    it->second.done = true;
    if (recorder_ != nullptr) recorder_->Ended(handle, status.ok(), FlightRecorder::NowUs());
    it->second.status = std::move(status);
  }
  cv_.NotifyAll();
}

void HandleTable::Complete(int64_t handle, Status status, OpResult result) {
  {
    MutexLock lock(&mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end() || it->second.done) return;
    it->second.done = true;
    if (recorder_ != nullptr) recorder_->Ended(handle, status.ok(), FlightRecorder::NowUs());
    it->second.status = std::move(status);
    it->second.result = std::move(result);
  }
  cv_.NotifyAll();
}

Status HandleTable::NotFound(int64_t handle) {
  return Status(Code::kNotFound,
                "handle " + std::to_string(handle) + " is unknown or was released");
}

Status HandleTable::Poll(int64_t handle, bool* done) {
  MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return NotFound(handle);
  *done = it->second.done;
  return Status::Ok();
}

Status HandleTable::Wait(int64_t handle, std::chrono::duration<double> timeout) {
  MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return NotFound(handle);
  if (!it->second.done && it->second.yield_us > 0 && timeout.count() != 0) {
    // A negative timeout (no limit of its own) yields the whole budget too.
    auto budget = std::chrono::microseconds(it->second.yield_us);
    if (timeout.count() > 0) {
      budget = std::min(budget, std::chrono::duration_cast<std::chrono::microseconds>(timeout));
    }
    const auto until = std::chrono::steady_clock::now() + budget;
    do {
      lock.Unlock();
      sched_yield();
      lock.Lock();
      it = entries_.find(handle);
    } while (it != entries_.end() && !it->second.done && std::chrono::steady_clock::now() < until);
    if (it == entries_.end()) return NotFound(handle);
  }
  auto is_done = [&] {
    mu_.AssertHeld();
    it = entries_.find(handle);
    return it == entries_.end() || it->second.done;
  };
  if (timeout.count() < 0) {
    cv_.Wait(&mu_, is_done);
  } else if (!cv_.WaitFor(&mu_, timeout, is_done)) {
    return DeadlineExceeded("the operation did not finish within " +
                            std::to_string(timeout.count()) + " s");
  }
  if (it == entries_.end()) return NotFound(handle);  // released by another thread meanwhile
  return it->second.status;
}

Status HandleTable::Release(int64_t handle) {
  MutexLock lock(&mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return NotFound(handle);
  Entry& e = spare_.Extract(&entries_, it);
  e.status = Status::Ok();  // the spare node holds no result (device memory is freed here)
  e.result = OpResult();
  return Status::Ok();
}

size_t HandleTable::size() const {
  MutexLock lock(&mu_);
  return entries_.size();
}

}  // namespace hora
