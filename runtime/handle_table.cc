#include "runtime/handle_table.h"

namespace hora {

int64_t HandleTable::Create() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t h = next_++;
  entries_.emplace(h, Entry());
  return h;
}

void HandleTable::Complete(int64_t handle, Status status, OpResult result) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(handle);
    if (it == entries_.end() || it->second.done) return;
    it->second.done = true;
    it->second.status = std::move(status);
    it->second.result = std::move(result);
  }
  cv_.notify_all();
}

Status HandleTable::NotFound(int64_t handle) {
  return Status(Code::kNotFound, "handle " + std::to_string(handle) + " is unknown or was released");
}

Status HandleTable::Poll(int64_t handle, bool* done) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return NotFound(handle);
  *done = it->second.done;
  return Status::Ok();
}

Status HandleTable::Wait(int64_t handle, std::chrono::duration<double> timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  auto it = entries_.find(handle);
  if (it == entries_.end()) return NotFound(handle);
  auto is_done = [&] {
    it = entries_.find(handle);
    return it == entries_.end() || it->second.done;
  };
  if (timeout.count() < 0) {
    cv_.wait(lock, is_done);
  } else if (!cv_.wait_for(lock, timeout, is_done)) {
    return DeadlineExceeded("the operation did not finish within " +
                            std::to_string(timeout.count()) + " s");
  }
  if (it == entries_.end()) return NotFound(handle);  // released by another thread meanwhile
  return it->second.status;
}

Status HandleTable::Release(int64_t handle) {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.erase(handle) == 0) return NotFound(handle);
  return Status::Ok();
}

size_t HandleTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace hora
