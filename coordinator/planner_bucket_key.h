// Private to the planner (coordinator/planner.cc): what tensors in one bucket share, the
// key the planner groups complete tensors by, and the bucket it describes.
#ifndef HORA_COORDINATOR_PLANNER_BUCKET_KEY_H_
#define HORA_COORDINATOR_PLANNER_BUCKET_KEY_H_

#include <cstdint>
#include <cstring>
#include <tuple>

#include "common/types.h"
#include "coordinator/planner.h"

namespace hora {
namespace planner_internal {

// Allreduce and broadcast tensors are fused into buckets; the other collectives go alone.
bool Fusable(CollectiveType c);

inline uint64_t Bits(double v) {
  uint64_t b;
  std::memcpy(&b, &v, sizeof(b));
  return b;
}

// What tensors in one bucket share. Fields that do not apply to a collective are normalized
// (op kSum, root 0, scales 1.0) so they never split groups.
struct BucketKey {
  CollectiveType collective = CollectiveType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  Device device = Device::kCpu;
  int joined = 0;  // ranks joined when the tensor became complete; last so that keys
                   // differing only in it are adjacent in a map

  auto Tie() const {
    return std::make_tuple(collective, dtype, op, root, Bits(prescale), Bits(postscale), device,
                           joined);
  }
  bool operator<(const BucketKey& o) const { return Tie() < o.Tie(); }
  bool SameFusion(const BucketKey& o) const {
    BucketKey a = *this, b = o;
    a.joined = b.joined = 0;
    return !(a < b) && !(b < a);
  }
};

// The key of a complete tensor with `joined` ranks joined.
BucketKey KeyOf(const TensorSpec& s, int joined);
// An empty bucket with the key's shared fields.
PlannedBucket BucketOf(const BucketKey& k);

}  // namespace planner_internal
}  // namespace hora

#endif  // HORA_COORDINATOR_PLANNER_BUCKET_KEY_H_
