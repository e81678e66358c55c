// Runs one negotiated bucket on a communicator: packs the tensors into the persistent fusion
// buffer (applying the prescale in the same pass), runs the collective, and unpacks (applying
// the postscale). A bucket of one tensor runs in place on the caller's output, without the
// extra copies. Average is a sum with postscale 1/size.
//
// Not thread-safe: owned and driven by the Engine's background thread.
#ifndef HORA_RUNTIME_BUCKET_EXECUTOR_H_
#define HORA_RUNTIME_BUCKET_EXECUTOR_H_

#include <vector>

#include "collectives/communicator.h"
#include "common/status.h"
#include "coordinator/messages.h"
#include "runtime/handle_table.h"
#include "runtime/tensor_queue.h"

namespace hora {

class BucketExecutor {
 public:
  explicit BucketExecutor(Communicator* comm) : comm_(comm) {}

  // requests[i] is this rank's request for plan.entries[i], or nullptr where this rank has
  // joined (it contributes zeros). results receives one OpResult per entry (filled for
  // allgather, reducescatter and alltoall).
  Status Run(const BucketPlan& plan, const std::vector<const Request*>& requests,
             std::vector<OpResult>* results);

 private:
  Status RunAllreduce(const BucketPlan& plan, const std::vector<const Request*>& requests);
  Status RunBroadcast(const BucketPlan& plan, const std::vector<const Request*>& requests);
  Status RunAllgather(const BucketPlan& plan, const Request& request, OpResult* result);
  Status RunReducescatter(const BucketPlan& plan, const Request& request, OpResult* result);
  Status RunAlltoall(const BucketPlan& plan, const Request& request, OpResult* result);
  char* Fusion(size_t bytes);

  Communicator* comm_;        // not owned
  std::vector<char> fusion_;  // grows to the largest bucket, then stays
};

}  // namespace hora

#endif  // HORA_RUNTIME_BUCKET_EXECUTOR_H_
