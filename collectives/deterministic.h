// Deterministic reductions (HORA_DETERMINISTIC, docs/design.md "Deterministic reductions").
//
// A backend's allreduce adds the ranks' values in an order of its own (shm: each member starts
// its slice from its own data, then the next members; gloo: around its ring), and its slices
// depend on the buffer's size, so the bits of a float sum change with the fusion threshold,
// the grouping, the backend and the host layout. Here every element of a Sum is instead
//
//   out = x[0]; out = out + x[1]; ...; out = out + x[n-1];  then out = out * post
//
// x[r] being rank r's (prescaled) value and each + being common/reduce.h's ReduceInto (float16
// and bfloat16 widened to float32 and rounded back at each step), which is elementwise: the
// result does not depend on which elements share a buffer. Product is done the same way (a
// float product is not associative either); Min and Max are exact in any order and integers
// wrap the same in any order, so those go the backend's way.
//
// It runs on any Communicator as a reduce-scatter by ownership and an allgather: the buffer is
// cut into one slice per rank, rank j receives every rank's slice j (Alltoallv), adds them in
// rank order, scales them, and the slices are gathered back (Allgatherv). Each rank sends and
// receives (n-1)/n of the buffer twice, what a ring allreduce moves. Large buffers go in
// pieces so that a rank's received slices are reduced while they are in cache.
#ifndef HORA_COLLECTIVES_DETERMINISTIC_H_
#define HORA_COLLECTIVES_DETERMINISTIC_H_

#include <memory>
#include <vector>

#include "collectives/communicator.h"

namespace hora {

// Whether DeterministicAllreduce changes the result of (dtype, op) compared with a backend's
// allreduce: floating types with Sum or Product.
bool NeedsDeterministicOrder(DataType dtype, ReduceOp op);

// The bytes of the buffer one round handles: every rank's slice of it is 1/n of that.
constexpr size_t kDeterministicPieceBytes = size_t{4} << 20;

// The allreduce above on comm (collective; in place): buf holds count elements of dtype; op is
// Sum or Product (Average is Sum with post = 1/n). scratch grows to the size of a piece.
// piece_bytes bounds the bytes of the buffer handled per round (> 0).
Status DeterministicAllreduce(Communicator* comm, void* buf, size_t count, DataType dtype,
                              ReduceOp op, const Postscale& post, std::vector<char>* scratch,
                              size_t piece_bytes = kDeterministicPieceBytes);

// Reducescatter in the same order: rank j's out is the rank-order reduction of every rank's
// slice j (counts as for Communicator::Reducescatter). scratch grows to n slices of this rank.
Status DeterministicReducescatter(Communicator* comm, const void* in, void* out,
                                  const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                                  std::vector<char>* scratch);

// A Communicator whose Allreduce, AllreduceScaled and Reducescatter are the ones above where the
// order matters (NeedsDeterministicOrder) and the wrapped one's otherwise; every other method
// is the wrapped one's. A backend that accepts Communicator::OfferRankOrder (shm) computes the
// same formula in its own allreduce, which then serves every allreduce. CreateCommunicator wraps a
// CPU communicator in it when BackendConfig::deterministic is set.
class DeterministicCommunicator : public Communicator {
 public:
  explicit DeterministicCommunicator(std::unique_ptr<Communicator> inner);

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* name() const override { return inner_->name(); }
  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override;
  bool folds_postscale() const override { return true; }
  Status AllreduceScaled(void* buf, size_t count, DataType dtype, ReduceOp op,
                         const Postscale& post) override;
  Status Broadcast(void* buf, size_t bytes, int root) override {
    return inner_->Broadcast(buf, bytes, root);
  }
  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes_per_rank) override {
    return inner_->Allgatherv(in, out, bytes_per_rank);
  }
  Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override {
    return inner_->Alltoallv(in, send_bytes, out, recv_bytes);
  }
  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override;
  Status Barrier() override { return inner_->Barrier(); }
  Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override {
    return inner_->Send(buf, bytes, peer, tag);
  }
  Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override {
    return inner_->Recv(buf, bytes, peer, tag);
  }
  void* SharedBoard(size_t* bytes) override { return inner_->SharedBoard(bytes); }
  std::unique_ptr<Work> Fence() override { return inner_->Fence(); }
  DeviceOps* device_ops() override { return inner_->device_ops(); }
  void Abort(const Status& reason) override { inner_->Abort(reason); }

 private:
  std::unique_ptr<Communicator> inner_;
  bool native_;                // inner_ accepted OfferRankOrder
  std::vector<char> scratch_;  // the received slices of one piece (one thread drives us)
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_DETERMINISTIC_H_
