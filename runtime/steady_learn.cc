// The steady path's learning (runtime/steady_path.h "Learning"): which of the coordinator's
// plans make a name a cache entry, and which entries carry their data on the board.
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
    LearnOne(spec, bucket.entries[i].id, fused);
  }
}

void SteadyPath::LearnOne(const TensorSpec& spec, int32_t id, bool grouped) {
  Learning& l = learning_[spec.name];
  if (l.count > 0 && l.spec == spec && l.grouped == grouped) {
    ++l.count;
  } else {
    l.spec = spec;
    l.grouped = grouped;
    l.count = 1;
  }
  if (l.count < options_.warmup) return;
  auto it = by_name_.find(spec.name);
  if (it == by_name_.end()) {
    if (entries_.size() >= SteadyBoard::kMaxEntries) return;
    by_name_.emplace(spec.name, static_cast<uint32_t>(entries_.size()));
    Entry entry{spec, id, 0};
    entry.grouped = grouped;
    entries_.push_back(std::move(entry));
    stats_.entries = static_cast<int64_t>(entries_.size());
  } else {
    Entry& entry = entries_[it->second];  // the instance count goes on
    entry.spec = spec;
    entry.grouped = grouped;
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
    case CollectiveType::kAlltoall: {
      // Even splits on every member (so every member receives rows / n from each), never
      // Eager: on comm_.
      const std::vector<int64_t>& recv = entry.recv_splits;
      const int64_t n = static_cast<int64_t>(ranks_.size());
      if (comm_ == nullptr || bytes == 0 || spec.shape.empty() || spec.shape[0] % n != 0 ||
          static_cast<int64_t>(recv.size()) != n ||
          (!spec.splits.empty() && static_cast<int64_t>(spec.splits.size()) != n)) {
        return false;
      }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t even = spec.shape[0] / n;
        if (recv[i] != even || (!spec.splits.empty() && spec.splits[i] != even)) return false;
      }
      return true;
    }
    case CollectiveType::kAllgather: {
      // Every member's rows alike: each member's input is as large as this one's.
      const std::vector<int64_t>& dims = entry.first_dims;
      if (spec.shape.empty() || dims.size() != ranks_.size()) return false;
      for (int64_t d : dims) {
        if (d != spec.shape[0]) return false;
      }
      return board_->Runs(bytes);
    }
    default:
      return false;
  }
}

bool SteadyPath::Eager(uint32_t e, const Entry& entry, const TensorSpec& spec) const {
  if (entry.grouped && !board_->AgreesCheaply() && comm_ != nullptr) return false;
  return spec.collective != CollectiveType::kReducescatter &&
         spec.collective != CollectiveType::kAlltoall && board_->Eager(e, spec.ByteSize());
}

}  // namespace hora
