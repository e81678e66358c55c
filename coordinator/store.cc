// The rendezvous store: set, and get that waits for the key up to the caller's timeout.
#include <algorithm>

#include "common/mutex.h"
#include "coordinator/core.h"

namespace hora {
namespace {

constexpr int64_t kMaxStoreWaitMs = int64_t{24} * 3600 * 1000;

}  // namespace

Status CoordinatorCore::StoreSet(const std::string& key, const std::string& value, bool erase) {
  if (key.empty()) return InvalidArgument("store: empty key");
  MutexLock lock(&store_mu_);
  if (store_closed_) return Unavailable("the coordinator is shutting down");
  if (erase) {
    store_.erase(key);
    return Status::Ok();
  }
  store_[key] = value;
  store_cv_.NotifyAll();
  return Status::Ok();
}

StatusOr<std::string> CoordinatorCore::StoreGet(const std::string& key, int64_t timeout_ms,
                                                TimePoint call_deadline) {
  if (key.empty()) return InvalidArgument("store: empty key");
  timeout_ms = std::clamp<int64_t>(timeout_ms, 0, kMaxStoreWaitMs);
  const TimePoint deadline =
      std::min(Clock::now() + std::chrono::milliseconds(timeout_ms), call_deadline);
  MutexLock lock(&store_mu_);
  store_cv_.WaitUntil(&store_mu_, deadline, [&] {
    store_mu_.AssertHeld();
    return store_closed_ || store_.count(key) > 0;
  });
  auto it = store_.find(key);
  if (it != store_.end()) return it->second;
  if (store_closed_) return Unavailable("the coordinator is shutting down");
  return DeadlineExceeded("store: key '" + key + "' was not set within " +
                          std::to_string(timeout_ms) + " ms");
}

}  // namespace hora
