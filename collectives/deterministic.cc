#include "collectives/deterministic.h"

#include <algorithm>

namespace hora {
namespace {

// Rank j's slice of m elements: [m*j/n, m*(j+1)/n), so the slices differ by one element at most.
size_t SliceBegin(size_t m, int j, int n) {
  return static_cast<size_t>((static_cast<unsigned __int128>(m) * j) / n);
}

// dst = the rank-order reduction of the n blocks of `count` elements at src (block r is rank
// r's): block 0 copied, then ReduceInto block by block. dst may be block 0 itself.
void ReduceInRankOrder(void* dst, const char* src, int n, size_t count, DataType dtype,
                       ReduceOp op) {
  const size_t bytes = count * DataTypeSize(dtype);
  if (dst != src && bytes > 0) std::copy(src, src + bytes, static_cast<char*>(dst));
  for (int r = 1; r < n; ++r) ReduceInto(dst, src + r * bytes, count, dtype, op);
}

}  // namespace

bool NeedsDeterministicOrder(DataType dtype, ReduceOp op) {
  if (op != ReduceOp::kSum && op != ReduceOp::kProduct) return false;
  switch (dtype) {
    case DataType::kFloat16:
    case DataType::kBfloat16:
    case DataType::kFloat32:
    case DataType::kFloat64:
      return true;
    default:
      return false;
  }
}

Status DeterministicAllreduce(Communicator* comm, void* buf, size_t count, DataType dtype,
                              ReduceOp op, const Postscale& post, std::vector<char>* scratch,
                              size_t piece_bytes) {
  const int n = comm->size();
  const int me = comm->rank();
  const size_t esize = DataTypeSize(dtype);
  if (n == 1) {
    ScaleInPlace(buf, count, dtype, post);
    return Status::Ok();
  }
  // At least one element per rank per round, so that every round moves data.
  const size_t piece = std::max<size_t>(piece_bytes / esize, static_cast<size_t>(n));
  std::vector<size_t> slice_bytes(n), recv_bytes(n);
  char* base = static_cast<char*>(buf);
  for (size_t p0 = 0; p0 < count; p0 += piece) {
    const size_t m = std::min(piece, count - p0);
    for (int j = 0; j < n; ++j) {
      slice_bytes[j] = (SliceBegin(m, j + 1, n) - SliceBegin(m, j, n)) * esize;
    }
    const size_t mine = slice_bytes[me] / esize;
    std::fill(recv_bytes.begin(), recv_bytes.end(), slice_bytes[me]);
    if (scratch->size() < slice_bytes[me] * n) scratch->resize(slice_bytes[me] * n);
    char* got = scratch->data();
    char* piece_base = base + p0 * esize;
    HORA_RETURN_IF_ERROR(comm->Alltoallv(piece_base, slice_bytes, got, recv_bytes));
    ReduceInRankOrder(got, got, n, mine, dtype, op);
    ScaleInPlace(got, mine, dtype, post);
    HORA_RETURN_IF_ERROR(comm->Allgatherv(got, piece_base, slice_bytes));
  }
  return Status::Ok();
}

Status DeterministicReducescatter(Communicator* comm, const void* in, void* out,
                                  const std::vector<size_t>& counts, DataType dtype, ReduceOp op,
                                  std::vector<char>* scratch) {
  const int n = comm->size();
  const size_t esize = DataTypeSize(dtype);
  const size_t mine = counts[comm->rank()];
  std::vector<size_t> send_bytes(n);
  for (int j = 0; j < n; ++j) send_bytes[j] = counts[j] * esize;
  const std::vector<size_t> recv_bytes(n, mine * esize);
  if (scratch->size() < mine * esize * n) scratch->resize(mine * esize * n);
  HORA_RETURN_IF_ERROR(comm->Alltoallv(in, send_bytes, scratch->data(), recv_bytes));
  ReduceInRankOrder(out, scratch->data(), n, mine, dtype, op);
  return Status::Ok();
}

DeterministicCommunicator::DeterministicCommunicator(std::unique_ptr<Communicator> inner)
    : inner_(std::move(inner)), native_(inner_->OfferRankOrder()) {}

Status DeterministicCommunicator::Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) {
  return AllreduceScaled(buf, count, dtype, op, Postscale());
}

Status DeterministicCommunicator::AllreduceScaled(void* buf, size_t count, DataType dtype,
                                                  ReduceOp op, const Postscale& post) {
  if (native_ || !NeedsDeterministicOrder(dtype, op)) {
    if (post.identity()) return inner_->Allreduce(buf, count, dtype, op);
    return inner_->AllreduceScaled(buf, count, dtype, op, post);
  }
  return DeterministicAllreduce(inner_.get(), buf, count, dtype, op, post, &scratch_);
}

Status DeterministicCommunicator::Reducescatter(const void* in, void* out,
                                                const std::vector<size_t>& counts, DataType dtype,
                                                ReduceOp op) {
  if (!NeedsDeterministicOrder(dtype, op)) return inner_->Reducescatter(in, out, counts, dtype, op);
  return DeterministicReducescatter(inner_.get(), in, out, counts, dtype, op, &scratch_);
}

}  // namespace hora
