// Small builders shared by the planner tests.
#ifndef HORA_TESTS_COORDINATOR_PLANNER_TEST_UTIL_H_
#define HORA_TESTS_COORDINATOR_PLANNER_TEST_UTIL_H_

#include <chrono>
#include <string>
#include <vector>

#include "coordinator/planner.h"

namespace hora {
namespace testing {

// A point on the planner's time line, `ms` milliseconds after an arbitrary origin.
inline TimePoint At(int ms) { return TimePoint() + std::chrono::milliseconds(ms); }

inline PlannerConfig Config(int size, int64_t threshold = 1 << 20, int cycle_ms = 5) {
  PlannerConfig c;
  c.size = size;
  c.fusion_threshold_bytes = threshold;
  c.cycle_time = std::chrono::milliseconds(cycle_ms);
  return c;
}

inline TensorSpec Spec(const std::string& name, CollectiveType collective,
                       std::vector<int64_t> shape, DataType dtype = DataType::kFloat32) {
  TensorSpec s;
  s.name = name;
  s.collective = collective;
  s.shape = std::move(shape);
  s.dtype = dtype;
  return s;
}

inline TensorSpec Allreduce(const std::string& name, int64_t n,
                            DataType dtype = DataType::kFloat32) {
  return Spec(name, CollectiveType::kAllreduce, {n}, dtype);
}

// Every rank in [0, size) submits `spec` at `now`.
inline void SubmitAll(Planner* p, int size, const TensorSpec& spec, TimePoint now) {
  for (int r = 0; r < size; ++r) p->Submit(r, spec, now);
}

inline std::vector<std::string> Names(const PlannedBucket& b) {
  std::vector<std::string> v;
  for (const auto& e : b.entries) v.push_back(e.name);
  return v;
}

inline std::vector<std::vector<std::string>> BucketNames(const PlannerOutput& out) {
  std::vector<std::vector<std::string>> v;
  for (const auto& b : out.buckets) v.push_back(Names(b));
  return v;
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COORDINATOR_PLANNER_TEST_UTIL_H_
