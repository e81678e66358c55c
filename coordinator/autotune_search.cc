#include "coordinator/autotune_search.h"

#include <algorithm>

#include "common/logging.h"

namespace hora {
namespace {

// The start value first, then the candidates in order, without duplicates.
std::vector<int64_t> Values(int64_t start, const std::vector<int64_t>& candidates, bool tune) {
  std::vector<int64_t> v{start};
  if (!tune) return v;
  for (int64_t c : candidates) {
    if (std::find(v.begin(), v.end(), c) == v.end()) v.push_back(c);
  }
  return v;
}

// Index of the best trial of `stage` (0 = any): highest score, ties to the earlier trial.
size_t BestIndex(const std::vector<TrialResult>& trials, int stage) {
  size_t best = trials.size();
  for (size_t i = 0; i < trials.size(); ++i) {
    if (stage != 0 && trials[i].stage != stage) continue;
    if (best == trials.size() || trials[i].score > trials[best].score) best = i;
  }
  return best;
}

}  // namespace

AutotuneSearch::AutotuneSearch(const SearchSpace& space) : space_(space) { StartStage(1); }

void AutotuneSearch::StartStage(int stage) {
  stage_ = stage;
  queue_.clear();
  if (stage == 1) {
    for (int64_t f : Values(space_.start.fusion_threshold_bytes, space_.fusion_candidates,
                            space_.tune_fusion)) {
      queue_.push_back({f, space_.start.cycle_time_us});
    }
  } else {
    const int64_t fusion = trials_[BestIndex(trials_, 1)].point.fusion_threshold_bytes;
    for (int64_t c :
         Values(space_.start.cycle_time_us, space_.cycle_candidates, space_.tune_cycle)) {
      const TuningPoint p{fusion, c};
      if (!Measured(p)) queue_.push_back(p);
    }
  }
  if (queue_.empty()) {
    if (stage == 1) {
      StartStage(2);
    } else {
      Finish();
    }
  }
}

bool AutotuneSearch::Measured(const TuningPoint& p) const {
  return std::any_of(trials_.begin(), trials_.end(),
                     [&](const TrialResult& t) { return t.point == p; });
}

TuningPoint AutotuneSearch::Current() const { return done_ ? Best() : queue_.front(); }

void AutotuneSearch::Report(double score, int samples) {
  HORA_CHECK(!done_);
  TrialResult t;
  t.point = queue_.front();
  t.score = score;
  t.samples = samples;
  t.stage = stage_;
  trials_.push_back(t);
  queue_.erase(queue_.begin());
  if (queue_.empty()) {
    if (stage_ == 1) {
      StartStage(2);
    } else {
      Finish();
    }
  }
}

void AutotuneSearch::Finish() {
  done_ = true;
  trials_[BestIndex(trials_, 0)].chosen = true;
}

TuningPoint AutotuneSearch::Best() const {
  HORA_CHECK(done_);
  for (const TrialResult& t : trials_) {
    if (t.chosen) return t.point;
  }
  HORA_CHECK(false);
  return {};
}

}  // namespace hora
