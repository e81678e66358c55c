#include "coordinator/planner_bucket_key.h"

namespace hora {
namespace planner_internal {

bool Fusable(CollectiveType c) {
  return c == CollectiveType::kAllreduce || c == CollectiveType::kBroadcast;
}

BucketKey KeyOf(const TensorSpec& s, int joined) {
  BucketKey k;
  k.collective = s.collective;
  k.dtype = s.dtype;
  k.device = s.device;
  k.joined = joined;
  const bool reduces =
      s.collective == CollectiveType::kAllreduce || s.collective == CollectiveType::kReducescatter;
  if (reduces) {
    k.op = s.op;
    k.prescale = s.prescale;
    k.postscale = s.postscale;
  }
  if (s.collective == CollectiveType::kBroadcast) k.root = s.root;
  return k;
}

PlannedBucket BucketOf(const BucketKey& k) {
  PlannedBucket b;
  b.collective = k.collective;
  b.dtype = k.dtype;
  b.op = k.op;
  b.root = k.root;
  b.prescale = k.prescale;
  b.postscale = k.postscale;
  b.device = k.device;
  b.joined_ranks = k.joined;
  return b;
}

}  // namespace planner_internal
}  // namespace hora
