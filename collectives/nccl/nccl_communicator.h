// The NCCL backend: collectives on CUDA device memory among the members of one process set,
// one communicator per set and device, on a CUDA stream of Hora's own.
//
// Creation (collective over the set): rank 0 of the set makes an ncclUniqueId and puts it in
// the bootstrap store under "<key_prefix>nccl_id"; the others get it (bounded by the timeout).
// Every member then initializes a non-blocking NCCL communicator (ncclCommInitRankConfig with
// blocking = 0) and polls ncclCommGetAsyncError until it is ready, bounded by the timeout.
//
// Asynchronous (collectives/communicator.h, "Completion"): each call enqueues its NCCL
// operation on the stream and returns; Fence() records a CUDA event and returns a Work that
// is done when the event has completed. Waits poll ncclCommGetAsyncError and are bounded by
// the timeout; an NCCL error or a timeout aborts the NCCL communicator (ncclCommAbort, which
// ends kernels waiting for a dead peer) and becomes the sticky error of every later call.
//
// Non-blocking mode: an NCCL call may return ncclInProgress; no other call may be made on the
// communicator until ncclCommGetAsyncError says ncclSuccess. Every NCCL call and Abort()'s
// ncclCommAbort are made under one mutex, so Abort() from another thread never races a call
// in progress and never waits longer than one short NCCL call.
//
// Send/Recv: NCCL has no tags; the n-th send to a peer matches that peer's n-th receive. The
// runtime runs every member's buckets in one plan order, so the tags it gives always agree
// with that order; the tag is only checked for range.
//
// dtypes: NCCL's; bool travels as uint8 with sum/max as max (logical or) and product/min as
// min (logical and), as common/reduce.h defines them for bool.
#ifndef HORA_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
#define HORA_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "common/kv_store.h"
#include "common/status.h"

namespace hora {

struct NcclConfig {
  int rank = 0;
  int size = 1;
  int device = 0;            // CUDA device ordinal
  KvStore* store = nullptr;  // used during creation only
  std::string key_prefix;    // unique per communicator, the same on every member
  std::chrono::milliseconds timeout{30000};
  std::function<const char*(const char*)> env;  // BackendConfig::env (HORA_NCCL_LIBRARY)
};

// Collective over the members. FAILED_PRECONDITION when NCCL cannot be loaded or there is no
// usable CUDA device (the message says which and why).
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(const NcclConfig& config);

// OK when NCCL reduces `dtype`: every dtype but int16 and uint16 (INVALID_ARGUMENT naming it).
Status NcclCanReduce(DataType dtype);

}  // namespace hora

#endif  // HORA_COLLECTIVES_NCCL_NCCL_COMMUNICATOR_H_
