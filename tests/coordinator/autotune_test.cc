// Autotuner: the coordinate search over (fusion threshold, cycle time), the sampling that
// scores each trial, the CSV log, and Planner::SetTuning.
#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "coordinator/autotune_log.h"
#include "coordinator/autotune_search.h"
#include "coordinator/autotuner.h"
#include "tests/coordinator/planner_test_util.h"

namespace hora {
namespace {

using testing::Allreduce;
using testing::At;
using testing::BucketNames;
using testing::Config;
using testing::SubmitAll;

SearchSpace Space() {
  SearchSpace s;
  s.start = {64, 1000};
  s.fusion_candidates = {16, 32, 64, 128};
  s.cycle_candidates = {500, 1000, 5000};
  return s;
}

// Runs the search to the end with a score function of the point; returns the points measured.
template <typename Score>
std::vector<TuningPoint> RunSearch(AutotuneSearch* search, Score score, int limit = 100) {
  std::vector<TuningPoint> measured;
  while (!search->Done() && limit-- > 0) {
    measured.push_back(search->Current());
    search->Report(score(search->Current()), 5);
  }
  return measured;
}

TEST_CASE("the search walks thresholds, then cycle times at the best, and picks the best",
          "[autotune]") {
  AutotuneSearch search(Space());
  // Best threshold 32; at 32, best cycle 5000 us.
  auto score = [](const TuningPoint& p) {
    double s = 100.0 - std::abs(static_cast<double>(p.fusion_threshold_bytes) - 32);
    return s + (p.cycle_time_us == 5000 ? 10 : 0);
  };
  const auto measured = RunSearch(&search, score);
  REQUIRE(search.Done());
  // Stage 1: the start first, then the others in order; stage 2 skips (32, 1000) (measured).
  const std::vector<TuningPoint> want = {{64, 1000},  {16, 1000}, {32, 1000},
                                         {128, 1000}, {32, 500},  {32, 5000}};
  REQUIRE(measured == want);
  REQUIRE(search.Best() == TuningPoint{32, 5000});
  REQUIRE(search.Current() == TuningPoint{32, 5000});
  int chosen = 0;
  for (const auto& t : search.trials()) chosen += t.chosen ? 1 : 0;
  REQUIRE(chosen == 1);
  REQUIRE(search.trials()[5].chosen);
  REQUIRE(search.trials()[0].stage == 1);
  REQUIRE(search.trials()[4].stage == 2);
}

TEST_CASE("the search stops after its trials and ties keep the earlier point", "[autotune]") {
  AutotuneSearch search(Space());
  const auto measured = RunSearch(&search, [](const TuningPoint&) { return 7.0; });
  REQUIRE(search.Done());
  REQUIRE(measured.size() == 4 + 2);                // |fusion| + |cycle| - 1
  REQUIRE(search.Best() == TuningPoint{64, 1000});  // the start, measured first
  REQUIRE(search.trials().size() == 6);
}

TEST_CASE("a dimension the user fixed is not searched", "[autotune]") {
  SearchSpace s = Space();
  s.tune_fusion = false;
  AutotuneSearch search(s);
  const auto measured =
      RunSearch(&search, [](const TuningPoint& p) { return p.cycle_time_us == 500 ? 2.0 : 1.0; });
  for (const auto& p : measured) REQUIRE(p.fusion_threshold_bytes == 64);
  REQUIRE(measured.size() == 3);
  REQUIRE(search.Best() == TuningPoint{64, 500});

  s.tune_fusion = s.tune_cycle = false;
  AutotuneSearch fixed(s);
  REQUIRE(RunSearch(&fixed, [](const TuningPoint&) { return 1.0; }).size() == 1);
  REQUIRE(fixed.Best() == s.start);
}

TEST_CASE("the median makes a trial's score robust to one outlying sample", "[autotune]") {
  REQUIRE(Median({3, 1, 2}) == 2);
  REQUIRE(Median({1, 100, 2, 3, 4}) == 3);
  REQUIRE(Median({4, 1, 3, 2}) == 2.5);
}

// One training step of `names` tensors of `n` floats, all ranks, emitted at `ms`.
PlannedBucket StepBucket(const std::vector<std::string>& names, int64_t n) {
  PlannedBucket b;
  b.collective = CollectiveType::kAllreduce;
  b.dtype = DataType::kFloat32;
  for (const auto& name : names) {
    PlannedBucket::Entry e;
    e.name = name;
    e.num_elements = n;
    b.entries.push_back(e);
  }
  return b;
}

TEST_CASE("the autotuner scores trials by measured bytes per second and converges", "[autotune]") {
  AutotuneConfig c;
  c.enabled = true;
  c.warmup_samples = 2;
  c.steps_per_sample = 3;
  c.samples_per_trial = 3;
  c.space = Space();
  Autotuner tuner(c);
  // A simulated job: a step's duration depends on the settings (threshold 128 and cycle 500
  // are fastest); every 11th step is slow (noise), which the median absorbs.
  auto step_ms = [](const TuningPoint& p, int step) {
    int ms = p.fusion_threshold_bytes == 128 ? 2 : 4;
    if (p.cycle_time_us == 500) ms -= 1;
    return step % 11 == 10 ? ms * 20 : ms;
  };
  int now = 0;
  int changes = 0;
  int steps = 0;
  std::map<int, int> steps_in_trial;
  while (!tuner.Done() && steps < 1000) {
    const TuningPoint p = tuner.Current();
    now += step_ms(p, steps);
    ++steps;
    steps_in_trial[tuner.trial()]++;
    if (tuner.Observe(StepBucket({"a", "b"}, 1000), At(now))) ++changes;
  }
  REQUIRE(tuner.Done());
  REQUIRE(tuner.Current() == TuningPoint{128, 500});
  REQUIRE(tuner.trials().size() == 6);
  REQUIRE(changes == 6);  // five moves to the next trial, one to the chosen point
  // Warm-up: 2 samples of 3 steps before trial 0 counts; then 3 samples of 3 steps per trial.
  REQUIRE(steps_in_trial[0] == 2 * 3 + 3 * 3);
  REQUIRE(steps_in_trial[1] == 3 * 3);
  REQUIRE(steps == 6 + 6 * 9);
  // Nothing changes after the search is done.
  REQUIRE_FALSE(tuner.Observe(StepBucket({"a", "b"}, 1000), At(now + 5)));
  // The score is bytes per second: 2 tensors * 1000 floats * 4 bytes per step.
  const TrialResult& last = tuner.trials().back();
  REQUIRE(last.point == TuningPoint{128, 5000});
  REQUIRE(last.score == Approx(8000.0 / 0.002).epsilon(0.01));
}

TEST_CASE("buckets that are not allreduces do not count", "[autotune]") {
  AutotuneConfig c;
  c.warmup_samples = 0;
  c.steps_per_sample = 1;
  c.samples_per_trial = 1;
  c.space = Space();
  Autotuner tuner(c);
  PlannedBucket b = StepBucket({"x"}, 10);
  b.collective = CollectiveType::kBroadcast;
  for (int i = 0; i < 10; ++i) REQUIRE_FALSE(tuner.Observe(b, At(i)));
  REQUIRE(tuner.trial() == 0);
  REQUIRE(tuner.Observe(StepBucket({"x"}, 10), At(11)));
  REQUIRE(tuner.trial() == 1);
}

TEST_CASE("the CSV has a header, one row per trial and one chosen row", "[autotune]") {
  AutotuneSearch search(Space());
  RunSearch(&search, [](const TuningPoint& p) { return p.fusion_threshold_bytes * 1.5; });
  const std::string csv = FormatAutotuneCsv(search.trials());
  std::istringstream in(csv);
  std::string line;
  std::getline(in, line);
  REQUIRE(line ==
          "trial,stage,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_s,samples,chosen");
  std::vector<std::string> rows;
  while (std::getline(in, line)) rows.push_back(line);
  REQUIRE(rows.size() == search.trials().size());
  REQUIRE(rows[0] == "0,1,64,1,96,5,0");
  int chosen = 0;
  for (const auto& r : rows) chosen += r.back() == '1' ? 1 : 0;
  REQUIRE(chosen == 1);
  REQUIRE(rows[3] == "3,1,128,1,192,5,1");
  REQUIRE(rows[4] == "4,2,128,0.5,192,5,0");

  const std::string path =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/autotune.csv";
  REQUIRE(WriteAutotuneLog(path, search.trials()).ok());
  std::ifstream f(path);
  std::stringstream read;
  read << f.rdbuf();
  REQUIRE(read.str() == csv);
  const Status bad = WriteAutotuneLog("/nonexistent-dir/x.csv", search.trials());
  REQUIRE(!bad.ok());
  REQUIRE(bad.message().find("/nonexistent-dir/x.csv.tmp") != std::string::npos);
}

TEST_CASE("SetTuning applies to tensors already waiting", "[autotune][planner]") {
  Planner p(Config(2, /*threshold=*/1 << 20, /*cycle_ms=*/100));
  // Two complete tensors wait for a third that rank 1 has not submitted yet.
  SubmitAll(&p, 2, Allreduce("a", 16), At(0));
  SubmitAll(&p, 2, Allreduce("b", 16), At(0));
  p.Submit(0, Allreduce("c", 16), At(0));
  REQUIRE(p.Poll(At(1)).buckets.empty());
  // A threshold of one tensor makes both buckets full at once.
  p.SetTuning(64, std::chrono::milliseconds(100));
  REQUIRE(BucketNames(p.Poll(At(2))) == std::vector<std::vector<std::string>>{{"a"}, {"b"}});
  // A shorter cycle time makes a waiting tensor due sooner.
  p.SetTuning(1 << 20, std::chrono::milliseconds(100));
  SubmitAll(&p, 2, Allreduce("d", 16), At(3));
  REQUIRE(p.Poll(At(4)).buckets.empty());
  p.SetTuning(1 << 20, std::chrono::milliseconds(1));
  REQUIRE(p.NextDeadline() <= At(4));
  REQUIRE(BucketNames(p.Poll(At(5))) == std::vector<std::vector<std::string>>{{"d"}});
}

}  // namespace
}  // namespace hora
