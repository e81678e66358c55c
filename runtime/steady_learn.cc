// The steady path's learning (runtime/steady_path.h "Learning"): which of the coordinator's
// plans make a name a cache entry, and which entries carry their data on the board.
#include <algorithm>
#include <functional>

#include "runtime/steady_path.h"

namespace hora {

void SteadyPath::Learn(const BucketPlan& bucket, const std::vector<const TensorSpec*>& specs) {
  MutexLock lock(&mu_);
  if (learning_over_) return;
  if (bucket.joined_ranks > 0) {
    learning_over_ = true;
    learning_.clear();
    return;
  }
  // Every member decides the same from the same plan and specs. A fused bucket counts for
  // each of its tensors (grouped: the steady path runs it fused with the others of its log
  // group). On a board whose agreements cost more than the coordinator's fused round
  // (SteadyBoard::AgreesCheaply: messages) a grouped tensor is not Eager: it is agreed on
  // without its data and runs on comm_, so a set without comm_ leaves the small ones to the
  // coordinator.
  const bool fused = specs.size() > 1;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (specs[i] == nullptr) continue;
    const TensorSpec& spec = *specs[i];
    if (IsOneShotName(spec.name)) continue;  // never submitted again: nothing to learn
    if (!Cacheable(bucket, bucket.entries[i], spec) ||
        (fused && !board_->AgreesCheaply() && comm_ == nullptr &&
         spec.ByteSize() <= board_->MaxEagerBytes())) {
      learning_.erase(spec.name);
      continue;
    }
    LearnOne(spec, bucket.entries[i], fused);
  }
}

void SteadyPath::LearnOne(const TensorSpec& spec, const BucketPlan::Entry& planned, bool grouped) {
  Learning& l = learning_[spec.name];
  if (l.count > 0 && l.spec == spec && l.grouped == grouped && l.layout == planned.layout) {
    ++l.count;
  } else {
    l.spec = spec;
    l.grouped = grouped;
    l.layout = planned.layout;
    l.dims =
        spec.collective == CollectiveType::kAlltoall ? planned.recv_splits : planned.first_dims;
    l.count = 1;
  }
  const int32_t id = planned.id;
  if (l.count < options_.warmup) return;
  auto it = by_name_.find(spec.name);
  if (it == by_name_.end()) {
    if (entries_.size() >= SteadyBoard::kMaxEntries) return;
    by_name_.emplace(spec.name, static_cast<uint32_t>(entries_.size()));
    Entry entry{spec, id, 0};
    entry.grouped = grouped;
    entry.dims = l.dims;
    entries_.push_back(std::move(entry));
    stats_.entries = static_cast<int64_t>(entries_.size());
  } else {
    Entry& entry = entries_[it->second];  // the instance count goes on
    entry.spec = spec;
    entry.grouped = grouped;
    entry.dims = l.dims;
  }
}

bool SteadyPath::Cacheable(const BucketPlan& bucket, const BucketPlan::Entry& entry,
                           const TensorSpec& spec) const {
  if (bucket.device != Device::kCpu || !bucket.participants.empty() ||
      spec.collective != bucket.collective) {
    return false;
  }
  const size_t bytes = spec.ByteSize();
  switch (bucket.collective) {
    case CollectiveType::kAllreduce:
    case CollectiveType::kBroadcast:
      return board_->Runs(bytes);
    case CollectiveType::kReducescatter:
      return comm_ != nullptr && bytes > 0;  // never Eager (SteadyPath::Eager)
    case CollectiveType::kAlltoall:
      // Any splits, never Eager: on comm_, with the learned plan's receive splits (every
      // member decides alike: nothing here depends on this member's own sizes).
      return comm_ != nullptr && entry.recv_splits.size() == ranks_.size() && entry.layout != 0;
    case CollectiveType::kAllgather: {
      // Every member's rows alike: each member's input is as large as this one's, and the
      // board may carry it. Uneven rows: on comm_, with the learned first dimensions.
      const std::vector<int64_t>& dims = entry.first_dims;
      if (spec.shape.empty() || dims.size() != ranks_.size() || entry.layout == 0) return false;
      for (int64_t d : dims) {
        if (d != dims[0]) return comm_ != nullptr;
      }
      return board_->Runs(bytes);
    }
    default:
      return false;
  }
}

bool SteadyPath::Eager(uint32_t e, const Entry& entry, const TensorSpec& spec) const {
  if (entry.grouped && !board_->AgreesCheaply() && comm_ != nullptr) return false;
  if (spec.collective == CollectiveType::kAllgather &&
      std::adjacent_find(entry.dims.begin(), entry.dims.end(), std::not_equal_to<int64_t>()) !=
          entry.dims.end()) {
    return false;  // uneven rows: the board's slots hold equal inputs only
  }
  return spec.collective != CollectiveType::kReducescatter &&
         spec.collective != CollectiveType::kAlltoall && board_->Eager(e, spec.ByteSize());
}

}  // namespace hora
