// The Engine's announcements to the coordinator: ready notices, and their batching
// (runtime/engine.h "Notice batching").
#include "common/reduce.h"
#include "runtime/engine.h"

namespace hora {

namespace {
// A send or a recv is answered when its peer posts the other side, which a pipeline does
// much later by design: notice batching does not count them as waiting for their plan.
bool IsTransfer(CollectiveType c) {
  return c == CollectiveType::kSend || c == CollectiveType::kRecv;
}
}  // namespace

void Engine::AnnounceFresh() {
  std::vector<ReadyNotice> notices;
  int counted = 0;  // notices that count as waiting for their plan (not transfers)
  {
    MutexLock lock(&announce_mu_);
    queue_.AnnounceFresh([&](const Request& r) {
      announce_mu_.AssertHeld();  // called back synchronously, under the lock
      ReadyNotice n;
      const TensorKey key = TensorKeyOf(r.spec);
      auto it = ids_.find(key);
      if (it == ids_.end()) {
        n.id = next_id_++;
        ids_.emplace(key, n.id);
        id_keys_.emplace(n.id, key);
        id_specs_.emplace(n.id, r.spec);
        n.spec = r.spec;
      } else {
        n.id = it->second;
        TensorSpec& known = id_specs_[n.id];
        if (known != r.spec) {
          known = r.spec;
          n.spec = r.spec;
        }
      }
      const TensorSpec& spec = r.spec;
      if (spec.collective == CollectiveType::kAllreduce && spec.device == Device::kCpu &&
          static_cast<int64_t>(spec.ByteSize()) <= options_.inline_threshold_bytes) {
        std::string payload(spec.ByteSize(), '\0');
        ScaleCopy(&payload[0], r.input, static_cast<size_t>(spec.NumElements()), spec.dtype,
                  spec.prescale);
        n.payload = std::move(payload);
      }
      if (!IsTransfer(spec.collective)) ++counted;
      notices.push_back(std::move(n));
    });
  }
  // Outside announce_mu_: on rank 0 the send runs the coordinator inline, which may complete
  // operations of this rank (and look up their keys) before it returns.
  if (notices.empty()) return;
  unanswered_.fetch_add(counted, std::memory_order_acq_rel);
  client_->SendReady(std::move(notices));
}

void Engine::Announce() {
  if (unanswered_.load(std::memory_order_acquire) < CoordinatorClient::kUnbatchedNotices) {
    AnnounceFresh();
    return;
  }
  MutexLock lock(&mu_);
  if (tuning_.cycle_time_us <= 0) {
    lock.Unlock();
    AnnounceFresh();
    return;
  }
  if (!hold_armed_) {
    hold_armed_ = true;
    holding_.store(true, std::memory_order_release);
    hold_deadline_ =
        std::chrono::steady_clock::now() + std::chrono::microseconds(tuning_.cycle_time_us);
  }
  // Answers that came since the count was read found nothing held: look again.
  if (unanswered_.load(std::memory_order_acquire) < CoordinatorClient::kUnbatchedNotices) {
    announce_now_ = true;
  }
  cv_.NotifyAll();
}

void Engine::Answered(const PlanMessage& plan) {
  int answered = static_cast<int>(plan.errors.size());
  for (const BucketPlan& b : plan.buckets) {
    if (IsTransfer(b.collective)) continue;
    for (const BucketPlan::Entry& e : b.entries) answered += e.id >= 0 ? 1 : 0;
  }
  if (answered == 0) return;
  const int left = unanswered_.fetch_sub(answered, std::memory_order_acq_rel) - answered;
  if (left >= CoordinatorClient::kUnbatchedNotices || !holding_.load(std::memory_order_acquire)) {
    return;
  }
  MutexLock lock(&mu_);
  if (hold_armed_) {
    announce_now_ = true;
    cv_.NotifyAll();
  }
}

}  // namespace hora
