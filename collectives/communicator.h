// The data plane: collectives over contiguous buffers among the ranks of one job.
//
// A Communicator knows nothing of tensor names or negotiation: the runtime hands it one fused
// buffer at a time, in the same global order on every rank. Backends live in subfolders
// (gloo/, later mpi/, nccl/, shm/); a hierarchical backend is a Communicator built from two
// others (intra-host and inter-host), which is why every method takes plain buffers and sizes.
//
// Contract for every method:
//   - Collective: every rank calls it, in the same order, with matching sizes.
//   - Not thread-safe: one thread (the runtime's background thread) drives a communicator.
//   - Blocking, but bounded: a peer that dies or stops ends the call with PEER_FAILURE or
//     DEADLINE_EXCEEDED within the timeout the backend was created with. Never hangs.
//   - Average is not a backend op: the runtime reduces with Sum and applies 1/size as postscale.
//   - Zero-sized buffers are allowed and complete without traffic where the backend permits.
#ifndef HORA_COLLECTIVES_COMMUNICATOR_H_
#define HORA_COLLECTIVES_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace hora {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const char* name() const = 0;  // "gloo", ...

  // In place: buf holds count elements of dtype; afterwards every rank holds op over all ranks.
  // op is kSum, kMin, kMax or kProduct.
  virtual Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) = 0;

  // In place: root's bytes are copied into buf on every rank.
  virtual Status Broadcast(void* buf, size_t bytes, int root) = 0;

  // out receives every rank's input, concatenated in rank order; rank r contributes
  // bytes_per_rank[r] bytes (in points to bytes_per_rank[rank()] bytes).
  virtual Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) = 0;

  // in holds send_bytes[r] bytes for each rank r, concatenated in rank order; out receives
  // recv_bytes[r] bytes from each rank r, concatenated in rank order.
  virtual Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                           const std::vector<size_t>& recv_bytes) = 0;

  // in holds sum(counts) elements; out receives counts[rank()] elements: the op-reduction over
  // all ranks of the slice of in that belongs to this rank (slices in rank order).
  virtual Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts,
                               DataType dtype, ReduceOp op) = 0;

  virtual Status Barrier() = 0;
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_COMMUNICATOR_H_
