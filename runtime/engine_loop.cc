// The Engine's background thread: announce, run plans, complete handles.
#include <chrono>

#include "common/logging.h"
#include "common/reduce.h"
#include "runtime/engine.h"

namespace hora {

void Engine::BackgroundLoop() {
  for (;;) {
    std::deque<PlanMessage> plans;
    std::deque<int> joins;
    Status error;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !inbox_.empty() || !join_done_.empty() ||
               (!error_.ok() && !error_handled_);
      });
      if (stop_) return;
      plans.swap(inbox_);
      joins.swap(join_done_);
      error = error_;
      if (!error.ok()) error_handled_ = true;
    }
    if (!error.ok()) {
      FailEverything(error);
      continue;
    }
    for (const PlanMessage& plan : plans) HandlePlan(plan);
    for (int last_rank : joins) {
      int64_t handle = 0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        std::swap(handle, join_handle_);
      }
      OpResult result;
      result.join_rank = last_rank;
      if (handle != 0) handles_.Complete(handle, Status::Ok(), std::move(result));
    }
  }
}

std::string Engine::NameOf(int32_t id) {
  std::lock_guard<std::mutex> lock(announce_mu_);
  auto it = id_names_.find(static_cast<uint32_t>(id));
  return it == id_names_.end() ? std::string() : it->second;
}

void Engine::AnnounceFresh() {
  std::vector<ReadyNotice> notices;
  std::unique_lock<std::mutex> lock(announce_mu_);
  for (const Request* r : queue_.PopFresh()) {
    ReadyNotice n;
    auto it = ids_.find(r->spec.name);
    if (it == ids_.end()) {
      n.id = next_id_++;
      ids_.emplace(r->spec.name, n.id);
      id_names_.emplace(n.id, r->spec.name);
      id_specs_.emplace(n.id, r->spec);
      n.spec = r->spec;
    } else {
      n.id = it->second;
      TensorSpec& known = id_specs_[n.id];
      if (known != r->spec) {
        known = r->spec;
        n.spec = r->spec;
      }
    }
    const TensorSpec& spec = r->spec;
    if (spec.collective == CollectiveType::kAllreduce && spec.device == Device::kCpu &&
        static_cast<int64_t>(spec.ByteSize()) <= options_.inline_threshold_bytes) {
      std::string payload(spec.ByteSize(), '\0');
      ScaleCopy(&payload[0], r->input, static_cast<size_t>(spec.NumElements()), spec.dtype,
                spec.prescale);
      n.payload = std::move(payload);
    }
    notices.push_back(std::move(n));
  }
  lock.unlock();
  // Outside announce_mu_: on rank 0 the send runs the coordinator inline, which may complete
  // operations of this rank (and look up their names) before it returns.
  if (!notices.empty()) client_->SendReady(std::move(notices));
}

void Engine::OnPlan(PlanMessage plan) {
  for (const TensorErrorNotice& e : plan.errors) {
    std::string name = NameOf(e.id);
    if (name.empty()) continue;
    if (auto r = queue_.Take(name)) handles_.Complete(r->handle, e.status);
  }
  plan.errors.clear();
  PlanMessage rest;
  for (BucketPlan& bucket : plan.buckets) {
    if (bucket.inline_reduced) {
      CompleteInline(bucket);
    } else {
      rest.buckets.push_back(std::move(bucket));
    }
  }
  if (rest.buckets.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(std::move(rest));
  }
  cv_.notify_one();
}

void Engine::CompleteInline(const BucketPlan& bucket) {
  const double post = FinalPostscale(bucket.op, bucket.postscale, options_.size);
  Status error = AsyncError();
  for (const BucketPlan::Entry& e : bucket.entries) {
    if (e.id < 0) continue;  // this rank joined
    std::optional<Request> r = queue_.Take(NameOf(e.id));
    if (!r) continue;
    if (error.ok()) {
      ScaleCopy(r->output, e.inline_result.data(), static_cast<size_t>(e.num_elements),
                bucket.dtype, post);
    }
    handles_.Complete(r->handle, error);
  }
}

void Engine::HandlePlan(const PlanMessage& plan) {
  for (const BucketPlan& bucket : plan.buckets) RunBucket(bucket);
}

void Engine::RunBucket(const BucketPlan& bucket) {
  std::vector<Request> owned;
  owned.reserve(bucket.entries.size());
  std::vector<const Request*> requests(bucket.entries.size(), nullptr);
  std::vector<size_t> slot(bucket.entries.size(), SIZE_MAX);
  for (size_t i = 0; i < bucket.entries.size(); ++i) {
    int32_t id = bucket.entries[i].id;
    if (id < 0) continue;
    std::string name = NameOf(id);
    std::optional<Request> r;
    if (!name.empty()) r = queue_.Take(name);
    if (!r) {
      SetError(Internal("the coordinator planned tensor id " + std::to_string(id) +
                        " which this rank has not submitted"));
      return;
    }
    slot[i] = owned.size();
    owned.push_back(std::move(*r));
  }
  for (size_t i = 0; i < slot.size(); ++i) {
    if (slot[i] != SIZE_MAX) requests[i] = &owned[slot[i]];
  }
  Status status = AsyncError();
  std::vector<OpResult> results;
  if (status.ok()) status = executor_->Run(bucket, requests, &results);
  if (!status.ok() && AsyncError().ok()) {
    // A failed collective breaks the job. The coordinator usually knows why (a rank died):
    // wait briefly for its verdict so the error names the culprit, else report ours.
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::seconds(3), [&] { return !error_.ok() || stop_; });
    if (error_.ok()) {
      lock.unlock();
      client_->SendFailure(status.message());
      SetError(status);
    } else {
      status = error_;
    }
  } else if (!status.ok()) {
    status = AsyncError();
  }
  for (size_t i = 0; i < slot.size(); ++i) {
    if (slot[i] == SIZE_MAX) continue;
    handles_.Complete(owned[slot[i]].handle, status,
                      status.ok() ? std::move(results[i]) : OpResult());
  }
}

}  // namespace hora
