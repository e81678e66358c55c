// Inline reduction of small allreduces.
//
// A worker sends the (prescaled) data of an allreduce no larger than its inline threshold
// together with its ready notice. When such a tensor goes out, the coordinator already holds
// every rank's data: it reduces it here, in rank order, and sends the result in the plan. The
// ranks then only apply the postscale: the tensor costs one control-plane round trip instead
// of a round trip plus a data-plane collective (for a 4-byte allreduce that halves latency).
// Ranks that joined contribute zeros, as in a data-plane allreduce.
#include "common/reduce.h"
#include "coordinator/core.h"

namespace hora {

std::vector<std::string> CoordinatorCore::InlineReduceLocked(const SetState& set,
                                                             const PlannedBucket& bucket) const {
  if (bucket.collective != CollectiveType::kAllreduce) return {};
  const ReduceOp op = ReductionOp(bucket.op);
  const size_t esize = DataTypeSize(bucket.dtype);
  std::vector<std::string> results;
  results.reserve(bucket.entries.size());
  for (const PlannedBucket::Entry& e : bucket.entries) {
    const size_t n = static_cast<size_t>(e.num_elements);
    std::string acc;
    bool first = true;
    bool any_joined = false;
    const TensorKey key{set.id, e.name};
    for (size_t i = 0; i < set.ranks.size(); ++i) {
      if (i >= e.submitted.size() || !e.submitted[i]) {
        any_joined = true;
        continue;
      }
      const RankState& state = ranks_[set.ranks[i]];
      auto it = state.payloads.find(key);
      if (it == state.payloads.end() || it->second.size() != n * esize) return {};
      if (first) {
        acc = it->second;
        first = false;
      } else {
        ReduceInto(&acc[0], it->second.data(), n, bucket.dtype, op);
      }
    }
    if (first) return {};
    if (any_joined && op != ReduceOp::kSum) {
      std::string zeros(n * esize, '\0');
      ReduceInto(&acc[0], zeros.data(), n, bucket.dtype, op);
    }
    results.push_back(std::move(acc));
  }
  return results;
}

void CoordinatorCore::DropPayloadsLocked(const SetState& set, const PlannerOutput& out) {
  auto drop = [&](const std::string& name) {
    mu_.AssertHeld();
    const TensorKey key{set.id, name};
    for (int r : set.ranks) {
      RankState& state = ranks_[r];
      if (!state.payloads.empty()) state.payloads.erase(key);
    }
  };
  for (const PlannedBucket& b : out.buckets) {
    for (const PlannedBucket::Entry& e : b.entries) drop(e.name);
  }
  for (const TensorFailure& f : out.failures) drop(f.name);
}

}  // namespace hora
