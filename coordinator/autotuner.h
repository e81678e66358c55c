// The autotuner's measuring side: turns the buckets the coordinator emits into scores for
// AutotuneSearch (autotune_search.h) and says when the settings change. Pure: the caller
// passes every emitted bucket with the time it went out; no clock, no I/O, no threads.
//
// Score. The coordinator emits a bucket once every rank has submitted its tensors, and a
// training loop submits the next step's tensors only after this step's are reduced, so in
// steady state the rate at which allreduce bytes go out is the job's reduction throughput.
// A sample is the window from the end of the previous sample until some tensor name has gone
// out steps_per_sample times in it (a name goes out once per training step, as in Horovod);
// its score is the allreduce bytes emitted in the window over the window's length. The first
// warmup_samples samples of the job are thrown away (start-up, first-touch allocations).
// Each trial then takes samples_per_trial samples and is scored by their median, which a
// single slow or fast sample (a trial's first, straddling the change) cannot move.
//
// Thread safety: none; the coordinator calls it under its lock.
#ifndef HORA_COORDINATOR_AUTOTUNER_H_
#define HORA_COORDINATOR_AUTOTUNER_H_

#include <string>
#include <unordered_map>
#include <vector>

#include "coordinator/autotune_search.h"
#include "coordinator/planner.h"

namespace hora {

struct AutotuneConfig {
  bool enabled = false;
  std::string log_path;       // CSV written by the coordinator; "" = none
  int warmup_samples = 3;     // >= 0
  int steps_per_sample = 10;  // >= 1
  int samples_per_trial = 5;  // >= 1
  SearchSpace space;
};

// The default candidate lists (bytes; microseconds).
std::vector<int64_t> DefaultFusionCandidates();
std::vector<int64_t> DefaultCycleCandidates();

class Autotuner {
 public:
  explicit Autotuner(const AutotuneConfig& config);

  // Records a bucket that went out at `now`. Returns true when the settings to use changed:
  // a trial ended and the next (or, at the end, the chosen) point is Current().
  bool Observe(const PlannedBucket& bucket, TimePoint now);

  TuningPoint Current() const { return search_.Current(); }
  bool Done() const { return search_.Done(); }
  // 0-based index of the trial being measured (= trials().size() while searching).
  int trial() const { return static_cast<int>(search_.trials().size()); }
  const std::vector<TrialResult>& trials() const { return search_.trials(); }

 private:
  void CloseSample(TimePoint now);

  const AutotuneConfig config_;
  AutotuneSearch search_;
  bool started_ = false;
  TimePoint sample_start_;
  int64_t sample_bytes_ = 0;
  std::unordered_map<std::string, int> sample_counts_;
  int warmup_left_;
  std::vector<double> scores_;  // this trial's samples
};

// Median of a non-empty list (the mean of the two middle values for an even count).
double Median(std::vector<double> v);

}  // namespace hora

#endif  // HORA_COORDINATOR_AUTOTUNER_H_
