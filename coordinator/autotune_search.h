// The autotuner's search: which (fusion threshold, cycle time) to try next, and which one
// wins. Pure: scores come in from the caller (coordinator/autotuner.h measures them), no
// clock, no I/O. Unit tests feed it scores directly.
//
// Coordinate search over two small candidate lists, in two stages:
//   1. Fusion threshold: every candidate threshold at the starting cycle time.
//   2. Cycle time: every candidate cycle time at the best threshold of stage 1 (the point
//      already measured in stage 1 is not measured again).
// Then the best trial of all is chosen and kept for the rest of the job. A dimension the user
// fixed (tune_fusion / tune_cycle false) has the starting value as its only candidate, so its
// stage is a single trial (skipped when already measured). Each stage tries the starting value
// first, then the other candidates in the order given.
//
// Scores are "higher is better" (bytes reduced per second). Ties go to the earlier trial, so
// the starting settings are kept unless another point measures strictly better. Noise is the
// measuring side's concern (it scores a trial by the median of several samples); this search
// compares one number per trial. The number of trials is at most |fusion| + |cycle| - 1.
#ifndef HORA_COORDINATOR_AUTOTUNE_SEARCH_H_
#define HORA_COORDINATOR_AUTOTUNE_SEARCH_H_

#include <cstdint>
#include <vector>

namespace hora {

struct TuningPoint {
  int64_t fusion_threshold_bytes = 0;
  int64_t cycle_time_us = 0;
  bool operator==(const TuningPoint& o) const {
    return fusion_threshold_bytes == o.fusion_threshold_bytes && cycle_time_us == o.cycle_time_us;
  }
};

struct TrialResult {
  TuningPoint point;
  double score = 0;     // bytes per second (the median of the samples)
  int samples = 0;      // samples behind the score
  int stage = 0;        // 1 = fusion threshold, 2 = cycle time
  bool chosen = false;  // the winner, once the search is done
};

struct SearchSpace {
  TuningPoint start;                       // the configured settings
  std::vector<int64_t> fusion_candidates;  // bytes; duplicates and the start are skipped
  std::vector<int64_t> cycle_candidates;   // microseconds
  bool tune_fusion = true;
  bool tune_cycle = true;
};

class AutotuneSearch {
 public:
  explicit AutotuneSearch(const SearchSpace& space);

  // The point to measure now. After Done(): the chosen point.
  TuningPoint Current() const;
  // Records the score of Current() and moves on. REQUIRES !Done() (checked).
  void Report(double score, int samples);
  bool Done() const { return done_; }
  // The chosen point. REQUIRES Done() (checked).
  TuningPoint Best() const;
  // Every trial in the order measured; after Done() exactly one is chosen.
  const std::vector<TrialResult>& trials() const { return trials_; }

 private:
  void StartStage(int stage);
  void Finish();
  bool Measured(const TuningPoint& p) const;

  const SearchSpace space_;
  std::vector<TuningPoint> queue_;  // the rest of the current stage, next first
  int stage_ = 1;
  bool done_ = false;
  std::vector<TrialResult> trials_;
};

}  // namespace hora

#endif  // HORA_COORDINATOR_AUTOTUNE_SEARCH_H_
