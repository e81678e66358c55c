// The data plane: collectives over contiguous buffers among the ranks of one process set.
//
// A Communicator knows nothing of tensor names or negotiation: the runtime hands it one fused
// buffer at a time, in the same order on every member of its set (the coordinator's order).
// Backends live in subfolders (gloo/, loopback/, mpi/, shm/, hierarchical/, nccl/) and
// register with collectives/registry.h; a hierarchical backend is a Communicator built from
// two others (intra-host and inter-host), and the staged one (staged/) wraps a CPU backend's
// for CUDA tensors, which is why every method takes plain buffers and sizes.
// Ranks here are ranks within the set: 0 .. size()-1.
//
// Contract for every collective method:
//   - Collective: every member calls it, in the same order, with matching sizes. Send and
//     Recv involve two members, matched in call order per (peer, tag).
//   - Not thread-safe: one thread (the set's executor) drives a communicator; only Abort()
//     may be called from another thread.
//   - Bounded: a peer that dies or stops ends the call with PEER_FAILURE or DEADLINE_EXCEEDED
//     within the timeout the backend was created with, or at once after Abort(). Never hangs.
//   - Average is not a backend op: the runtime reduces with Sum and applies 1/size as postscale.
//   - Zero-sized buffers are allowed and complete without traffic where the backend permits.
//
// Completion. A CPU backend finishes the work inside each call; its Fence() returns nullptr.
// An asynchronous backend (a device stream, a progress thread) only enqueues the work: calls
// return once it is queued, the buffers must stay untouched until the Work that Fence()
// returns is done, and the runtime polls that Work on its completion thread. Work enqueued
// before a Fence() is covered by it.
#ifndef HORA_COLLECTIVES_COMMUNICATOR_H_
#define HORA_COLLECTIVES_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "common/reduce.h"
#include "common/status.h"
#include "common/types.h"

namespace hora {

class DeviceOps;  // collectives/device.h

// Work in progress on an asynchronous communicator. Thread-safe.
class Work {
 public:
  virtual ~Work() = default;
  // Non-blocking. True once the work has finished; then *status holds its outcome.
  virtual bool Test(Status* status) = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // the registry name: "gloo", "loopback", ...

  // In place: buf holds count elements of dtype; afterwards every rank holds op over all ranks.
  // op is kSum, kMin, kMax or kProduct.
  virtual Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) = 0;

  // Allreduce, then buf = buf * post.factor / post.divisor (common/reduce.h), bit for bit what
  // ScaleInPlace after Allreduce gives. A backend that folds the scale into its reduction
  // (folds_postscale(): each result element is scaled once, while it is in cache, by the rank
  // that reduced it) makes Average's division nearly free; for the others this is the two
  // steps, and a caller may rather scale later, off the data plane's thread.
  virtual bool folds_postscale() const { return false; }
  virtual Status AllreduceScaled(void* buf, size_t count, DataType dtype, ReduceOp op,
                                 const Postscale& post) {
    HORA_RETURN_IF_ERROR(Allreduce(buf, count, dtype, op));
    ScaleInPlace(buf, count, dtype, post);
    return Status::Ok();
  }

  // Asks the backend to compute, from now on, every Sum and Product of Allreduce and
  // AllreduceScaled as collectives/deterministic.h's rank-order formula (rank 0's value, then
  // each next rank's in turn, every element by ReduceInto, then the postscale). True if it
  // will; false (the default) leaves it as it was, and the deterministic wrapper then runs
  // its own composite on the backend's Alltoallv and Allgatherv.
  virtual bool OfferRankOrder() { return false; }

  // In place: root's bytes are copied into buf on every rank.
  virtual Status Broadcast(void* buf, size_t bytes, int root) = 0;

  // out receives every rank's input, concatenated in rank order; rank r contributes
  // bytes_per_rank[r] bytes (in points to bytes_per_rank[rank()] bytes). In place: in may be
  // this rank's own place in out (out + the bytes of the ranks before it); nothing is copied
  // for it then.
  virtual Status Allgatherv(const void* in, void* out,
                            const std::vector<size_t>& bytes_per_rank) = 0;

  // in holds send_bytes[r] bytes for each rank r, concatenated in rank order; out receives
  // recv_bytes[r] bytes from each rank r, concatenated in rank order.
  virtual Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                           const std::vector<size_t>& recv_bytes) = 0;

  // in holds sum(counts) elements; out receives counts[rank()] elements: the op-reduction over
  // all ranks of the slice of in that belongs to this rank (slices in rank order). In place:
  // out may be that slice of in itself (no other overlap of in and out is allowed).
  virtual Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                               DataType dtype, ReduceOp op) = 0;

  virtual Status Barrier() = 0;

  // Point-to-point: `bytes` bytes to / from rank `peer` (!= rank()). The n-th Send to a peer
  // with a tag matches that peer's n-th Recv from this rank with the same tag; both sides
  // give the same size (the runtime negotiates it).
  virtual Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) = 0;
  virtual Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) = 0;

  // Optional: memory that every member of the set maps (the same bytes, zeroed at creation,
  // *bytes of it, 64-byte aligned), for agreement among the members that must not wait
  // inside a collective (runtime/steady_board.h). Atomics in it must be lock-free and
  // address-free; futex waits on it must be process-shared. nullptr (the default) when the
  // members share no memory. Owned by the communicator, valid for its lifetime.
  virtual void* SharedBoard(size_t* bytes) {
    *bytes = 0;
    return nullptr;
  }

  // See "Completion" above. Default: a synchronous backend.
  virtual std::unique_ptr<Work> Fence() { return nullptr; }

  // A device backend's buffers and stream (collectives/device.h); null for CPU backends.
  // Buffers given to the collectives of a device communicator are device memory.
  virtual DeviceOps* device_ops() { return nullptr; }

  // Ends every call in progress and every later call with `reason` (the job is broken: a
  // peer died, the coordinator is lost). Thread-safe, idempotent; the first reason sticks.
  virtual void Abort(const Status& reason) = 0;
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_COMMUNICATOR_H_
