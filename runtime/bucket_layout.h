// The sizes of a single-tensor bucket's data-plane call (allgather, reducescatter, alltoall),
// from its plan and this rank's spec: the one computation that the host and the device paths
// of BucketExecutor share.
#ifndef HORA_RUNTIME_BUCKET_LAYOUT_H_
#define HORA_RUNTIME_BUCKET_LAYOUT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "common/types.h"
#include "coordinator/messages.h"

namespace hora {

// spec's shape with its first dimension replaced (a scalar becomes [first]).
std::vector<int64_t> WithFirstDim(const TensorSpec& spec, int64_t first);

struct RowLayout {
  std::vector<size_t> send_bytes;  // alltoall: bytes to each member
  std::vector<size_t> recv_bytes;  // bytes from each member
  int64_t rows = 0;                // rows of the output
  size_t out_bytes = 0;            // bytes of the output
};

// Allgather: every member's rows from the plan's first dimensions. size: the set's size.
StatusOr<RowLayout> AllgatherLayout(const BucketPlan& plan, const TensorSpec& spec, int size);
// Alltoall: this rank's splits (even when none were given) and the plan's receive splits.
StatusOr<RowLayout> AlltoallLayout(const BucketPlan& plan, const TensorSpec& spec, int size);

// Reducescatter: elements per member; rows are split as evenly as possible, the first
// members getting one more.
std::vector<size_t> ReducescatterCounts(const TensorSpec& spec, int size);
// Reducescatter: the rows member `rank` receives.
int64_t ReducescatterRows(const TensorSpec& spec, int size, int rank);

}  // namespace hora

#endif  // HORA_RUNTIME_BUCKET_LAYOUT_H_
