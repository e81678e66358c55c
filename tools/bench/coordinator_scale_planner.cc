// Mode "planner": one Planner fed as the service's reader threads feed it. Per ready message
// the service calls Submit for each notice and then Poll once (session.cc); here one thread
// plays every rank, in the order of coordinator_scale.h (chunk by chunk across ranks), and
// keeps a PlannerHint per rank and tensor across steps, as the core does per rank and id.
#include <algorithm>
#include <string>
#include <unordered_map>

#include "coordinator/planner.h"
#include "tools/bench/coordinator_scale.h"

namespace hora {
namespace scale_bench {
namespace {

struct StepCount {
  int64_t buckets = 0;
  int64_t entries = 0;
  int64_t polls = 0;
};

// One step; checks that every tensor was planned exactly once for every rank.
Status RunStep(Planner& planner, const std::vector<TensorSpec>& specs,
               const std::unordered_map<std::string, int32_t>& ids, const ScaleOptions& o, int step,
               std::vector<PlannerHint>* hints, StepCount* count) {
  const int n = static_cast<int>(specs.size());
  std::vector<PlanChecker> checkers;  // planner buckets are rank-independent: one suffices
  checkers.emplace_back(n);
  for (const auto& [begin, end] : NoticeChunks(o)) {
    for (int r = 0; r < o.ranks; ++r) {
      const TimePoint now = Clock::now();
      for (int t = begin; t < end; ++t) {
        planner.Submit(r, specs[t], now, -1, &(*hints)[static_cast<size_t>(r) * n + t]);
      }
      PlannerOutput out = planner.Poll(now);
      ++count->polls;
      if (!out.failures.empty()) {
        return Internal("planner failed '" + out.failures[0].name +
                        "': " + out.failures[0].status.ToString());
      }
      count->buckets += static_cast<int64_t>(out.buckets.size());
      for (const PlannedBucket& b : out.buckets) {
        for (const PlannedBucket::Entry& e : b.entries) {
          auto it = ids.find(e.name);
          const int32_t id = it == ids.end() ? -1 : it->second;
          if (!checkers[0].Entry(b.seq, id)) return Internal(checkers[0].error());
          ++count->entries;
        }
      }
    }
  }
  if (planner.PendingCount() != 0) {
    return Internal(std::to_string(planner.PendingCount()) + " names still pending after step " +
                    std::to_string(step));
  }
  return checkers[0].EndStep(0, step);
}

}  // namespace

StatusOr<ScaleResult> RunPlannerBench(const ScaleOptions& o) {
  PlannerConfig config;
  config.size = o.ranks;
  Planner planner(config);
  const std::vector<TensorSpec> specs = ModelTensors(o.tensors);
  std::unordered_map<std::string, int32_t> ids;  // name -> tensor index + 1
  for (size_t t = 0; t < specs.size(); ++t) ids[specs[t].name] = static_cast<int32_t>(t) + 1;
  std::vector<PlannerHint> hints(static_cast<size_t>(o.ranks) * specs.size());
  StepCount warm;
  for (int s = 0; s < o.warmup; ++s)
    HORA_RETURN_IF_ERROR(RunStep(planner, specs, ids, o, s, &hints, &warm));
  StepCount count;
  const auto t0 = Clock::now();
  const double c0 = ThreadCpuSeconds();
  for (int s = 0; s < o.steps; ++s) {
    HORA_RETURN_IF_ERROR(RunStep(planner, specs, ids, o, o.warmup + s, &hints, &count));
  }
  ScaleResult r;
  r.options = o;
  r.cpu_s = ThreadCpuSeconds() - c0;
  r.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  r.messages_in = static_cast<double>(count.polls) / o.steps;
  r.buckets = static_cast<double>(count.buckets) / o.steps;
  return r;
}

}  // namespace scale_bench
}  // namespace hora
