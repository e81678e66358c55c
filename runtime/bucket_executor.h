// Runs one negotiated bucket on a process set's communicator: packs the tensors into a fusion
// buffer (applying the prescale in the same pass), runs the collective, and unpacks
// (applying the postscale). A bucket of one tensor runs in place on the caller's output,
// without the extra copies. Average is a sum with postscale 1/size (the set's size).
//
// Start() does everything up to and including the collective call; the unpacking is returned
// as `finish`, which the caller runs once the communicator's work is done: at once for a
// synchronous communicator, on the completion thread for an asynchronous one (the fusion
// buffer stays leased to the bucket until `finish` has run, so the next bucket never writes
// into a buffer the communicator may still read).
//
// On a device communicator (Communicator::device_ops(), collectives/device.h) the inputs and
// outputs are device memory: bucket_executor_device.cc enqueues everything on the
// communicator's stream (waiting first for each request's `ready` event, then packing into a
// device fusion buffer, the collective, unpacking), so `finish` only gives the buffer back;
// allgather, reducescatter and alltoall results are device memory the result holds.
//
// Thread safety: Start is called by one thread (the set's executor); a `finish` may run on
// another thread, concurrently with later Starts.
#ifndef HORA_RUNTIME_BUCKET_EXECUTOR_H_
#define HORA_RUNTIME_BUCKET_EXECUTOR_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/communicator.h"
#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/messages.h"
#include "runtime/device_fusion_pool.h"
#include "runtime/handle_table.h"
#include "runtime/tensor_queue.h"
#include "runtime/timeline.h"

namespace hora {

// Fusion buffers: grow to the largest bucket, then stay. At most kMaxBuffers exist; Acquire
// waits for a lease to come back when all are out (asynchronous communicators only).
class FusionPool {
 public:
  static constexpr size_t kMaxBuffers = 4;
  using Lease = std::shared_ptr<std::vector<char>>;
  Lease Acquire(size_t bytes);

 private:
  void Return(std::vector<char>* buffer);

  Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<std::vector<char>>> free_ GUARDED_BY(mu_);
  size_t created_ GUARDED_BY(mu_) = 0;
};

class BucketExecutor {
 public:
  using Finish = std::function<Status()>;

  explicit BucketExecutor(Communicator* comm);

  // requests[i] is this rank's request for plan.entries[i], or nullptr where this rank has
  // joined (it contributes zeros). results receives one OpResult per entry (filled for
  // allgather, reducescatter and alltoall) and must stay alive until `finish` ran. On
  // success *finish may be empty (nothing to unpack). collective_us (the timeline's, may be
  // null) receives the time (TimelineNowUs) the data-plane call began, after packing.
  Status Start(const BucketPlan& plan, const std::vector<const Request*>& requests,
               std::vector<OpResult>* results, Finish* finish, int64_t* collective_us = nullptr);

 private:
  Status StartAllreduce(const BucketPlan& plan, const std::vector<const Request*>& requests,
                        Finish* finish);
  Status StartBroadcast(const BucketPlan& plan, const std::vector<const Request*>& requests,
                        Finish* finish);
  Status StartAllgather(const BucketPlan& plan, const Request& request, OpResult* result);
  Status StartReducescatter(const BucketPlan& plan, const Request& request, OpResult* result,
                            Finish* finish);
  Status StartAlltoall(const BucketPlan& plan, const Request& request, OpResult* result);
  Status StartSendRecv(const BucketPlan& plan, const Request& request);
  // The device twins (bucket_executor_device.cc).
  Status StartDevice(const BucketPlan& plan, const std::vector<const Request*>& requests,
                     std::vector<OpResult>* results, Finish* finish);
  Status DeviceAllreduce(const BucketPlan& plan, const std::vector<const Request*>& requests,
                         Finish* finish);
  Status DeviceBroadcast(const BucketPlan& plan, const std::vector<const Request*>& requests,
                         Finish* finish);
  Status DeviceAllgather(const BucketPlan& plan, const Request& request, OpResult* result);
  Status DeviceReducescatter(const BucketPlan& plan, const Request& request, OpResult* result,
                             Finish* finish);
  Status DeviceAlltoall(const BucketPlan& plan, const Request& request, OpResult* result);
  // A device result of `bytes` bytes on the request's device, held by `result`.
  StatusOr<void*> DeviceResult(const Request& request, size_t bytes, OpResult* result);
  void MarkCollective() {
    if (collective_us_ != nullptr) *collective_us_ = TimelineNowUs();
  }

  Communicator* comm_;  // not owned
  FusionPool pool_;
  DeviceOps* const device_;                        // comm_->device_ops(): null for CPU
  std::unique_ptr<DeviceFusionPool> device_pool_;  // when device_ != null
  int64_t* collective_us_ = nullptr;               // during Start
};

}  // namespace hora

#endif  // HORA_RUNTIME_BUCKET_EXECUTOR_H_
