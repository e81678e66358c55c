#include "coordinator/autotuner.h"

#include <algorithm>

#include "common/logging.h"

namespace hora {

std::vector<int64_t> DefaultFusionCandidates() {
  constexpr int64_t kMiB = 1 << 20;
  return {1 * kMiB, 4 * kMiB, 16 * kMiB, 64 * kMiB, 128 * kMiB};
}

std::vector<int64_t> DefaultCycleCandidates() { return {500, 1000, 2500, 5000, 10000}; }

double Median(std::vector<double> v) {
  HORA_CHECK(!v.empty());
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

Autotuner::Autotuner(const AutotuneConfig& config)
    : config_(config), search_(config.space), warmup_left_(config.warmup_samples) {
  HORA_CHECK(config.steps_per_sample >= 1 && config.samples_per_trial >= 1 &&
             config.warmup_samples >= 0);
}

bool Autotuner::Observe(const PlannedBucket& bucket, TimePoint now) {
  if (search_.Done() || bucket.collective != CollectiveType::kAllreduce) return false;
  if (!started_) {
    started_ = true;
    sample_start_ = now;
  }
  const int64_t element = static_cast<int64_t>(DataTypeSize(bucket.dtype));
  bool full = false;
  for (const PlannedBucket::Entry& e : bucket.entries) {
    sample_bytes_ += e.num_elements * element;
    if (++sample_counts_[e.name] >= config_.steps_per_sample) full = true;
  }
  if (!full) return false;
  const size_t trials_before = search_.trials().size();
  CloseSample(now);
  return search_.trials().size() != trials_before;
}

void Autotuner::CloseSample(TimePoint now) {
  const double seconds = std::max(std::chrono::duration<double>(now - sample_start_).count(), 1e-6);
  const double score = static_cast<double>(sample_bytes_) / seconds;
  sample_start_ = now;
  sample_bytes_ = 0;
  sample_counts_.clear();
  if (warmup_left_ > 0) {
    --warmup_left_;
    return;
  }
  scores_.push_back(score);
  if (static_cast<int>(scores_.size()) < config_.samples_per_trial) return;
  search_.Report(Median(scores_), static_cast<int>(scores_.size()));
  scores_.clear();
}

}  // namespace hora
