#include "runtime/bucket_executor.h"

#include <cstring>

#include "common/reduce.h"

namespace hora {
namespace {

std::vector<int64_t> WithFirstDim(const TensorSpec& spec, int64_t first) {
  std::vector<int64_t> shape = spec.shape;
  if (shape.empty()) shape.push_back(first);
  else shape[0] = first;
  return shape;
}

}  // namespace

char* BucketExecutor::Fusion(size_t bytes) {
  if (fusion_.size() < bytes) fusion_.resize(bytes);
  return fusion_.data();
}

Status BucketExecutor::Run(const BucketPlan& plan, const std::vector<const Request*>& requests,
                           std::vector<OpResult>* results) {
  results->assign(plan.entries.size(), OpResult());
  switch (plan.collective) {
    case CollectiveType::kAllreduce:
      return RunAllreduce(plan, requests);
    case CollectiveType::kBroadcast:
      return RunBroadcast(plan, requests);
    case CollectiveType::kBarrier:
      return comm_->Barrier();
    default:
      break;
  }
  // The remaining collectives are never fused and never run for a joined rank.
  if (plan.entries.size() != 1 || requests[0] == nullptr) {
    return Internal("bucket " + std::to_string(plan.seq) + " of " + CollectiveName(plan.collective) +
                    " must hold exactly one tensor of this rank");
  }
  switch (plan.collective) {
    case CollectiveType::kAllgather:
      return RunAllgather(plan, *requests[0], &(*results)[0]);
    case CollectiveType::kReducescatter:
      return RunReducescatter(plan, *requests[0], &(*results)[0]);
    case CollectiveType::kAlltoall:
      return RunAlltoall(plan, *requests[0], &(*results)[0]);
    default:
      return Internal("unknown collective in bucket " + std::to_string(plan.seq));
  }
}

Status BucketExecutor::RunAllreduce(const BucketPlan& plan,
                                    const std::vector<const Request*>& requests) {
  const size_t esize = DataTypeSize(plan.dtype);
  const double post = FinalPostscale(plan.op, plan.postscale, comm_->size());
  const ReduceOp op = ReductionOp(plan.op);
  if (plan.entries.size() == 1 && requests[0] != nullptr) {
    const Request& r = *requests[0];
    size_t n = static_cast<size_t>(plan.entries[0].num_elements);
    ScaleCopy(r.output, r.input, n, plan.dtype, plan.prescale);
    HORA_RETURN_IF_ERROR(comm_->Allreduce(r.output, n, plan.dtype, op));
    ScaleInPlace(r.output, n, plan.dtype, post);
    return Status::Ok();
  }
  size_t total = 0;
  for (const auto& e : plan.entries) total += static_cast<size_t>(e.num_elements);
  char* buf = Fusion(total * esize);
  size_t off = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    size_t n = static_cast<size_t>(plan.entries[i].num_elements);
    if (requests[i] == nullptr) {
      std::memset(buf + off * esize, 0, n * esize);
    } else {
      ScaleCopy(buf + off * esize, requests[i]->input, n, plan.dtype, plan.prescale);
    }
    off += n;
  }
  HORA_RETURN_IF_ERROR(comm_->Allreduce(buf, total, plan.dtype, op));
  off = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    size_t n = static_cast<size_t>(plan.entries[i].num_elements);
    if (requests[i] != nullptr) ScaleCopy(requests[i]->output, buf + off * esize, n, plan.dtype, post);
    off += n;
  }
  return Status::Ok();
}

Status BucketExecutor::RunBroadcast(const BucketPlan& plan,
                                    const std::vector<const Request*>& requests) {
  const size_t esize = DataTypeSize(plan.dtype);
  for (const Request* r : requests) {
    if (r == nullptr) return Internal("broadcast bucket with a joined rank");
  }
  if (requests.size() == 1) {
    return comm_->Broadcast(requests[0]->output, requests[0]->spec.ByteSize(), plan.root);
  }
  size_t total = 0;
  for (const auto& e : plan.entries) total += static_cast<size_t>(e.num_elements) * esize;
  char* buf = Fusion(total);
  const bool root = comm_->rank() == plan.root;
  size_t off = 0;
  if (root) {
    for (const Request* r : requests) {
      std::memcpy(buf + off, r->output, r->spec.ByteSize());
      off += r->spec.ByteSize();
    }
  }
  HORA_RETURN_IF_ERROR(comm_->Broadcast(buf, total, plan.root));
  if (!root) {
    off = 0;
    for (const Request* r : requests) {
      if (r->spec.ByteSize() > 0) std::memcpy(r->output, buf + off, r->spec.ByteSize());
      off += r->spec.ByteSize();
    }
  }
  return Status::Ok();
}

Status BucketExecutor::RunAllgather(const BucketPlan& plan, const Request& r, OpResult* result) {
  const auto& dims = plan.entries[0].first_dims;
  if (static_cast<int>(dims.size()) != comm_->size()) {
    return Internal("allgather plan has " + std::to_string(dims.size()) + " first dimensions");
  }
  const size_t row_bytes = static_cast<size_t>(r.spec.RowElements()) * DataTypeSize(r.spec.dtype);
  std::vector<size_t> bytes(dims.size());
  int64_t rows = 0;
  for (size_t i = 0; i < dims.size(); ++i) {
    bytes[i] = static_cast<size_t>(dims[i]) * row_bytes;
    rows += dims[i];
  }
  result->data.resize(static_cast<size_t>(rows) * row_bytes);
  result->shape = WithFirstDim(r.spec, rows);
  return comm_->Allgatherv(r.input, result->data.data(), bytes);
}

Status BucketExecutor::RunReducescatter(const BucketPlan& plan, const Request& r,
                                        OpResult* result) {
  const int size = comm_->size();
  const int64_t d0 = r.spec.shape.empty() ? 1 : r.spec.shape[0];
  const int64_t row = r.spec.RowElements();
  std::vector<size_t> counts(size);
  for (int i = 0; i < size; ++i) {
    counts[i] = static_cast<size_t>((d0 / size + (i < d0 % size ? 1 : 0)) * row);
  }
  const size_t esize = DataTypeSize(r.spec.dtype);
  const void* in = r.input;
  if (plan.prescale != 1.0) {
    char* buf = Fusion(r.spec.ByteSize());
    ScaleCopy(buf, r.input, static_cast<size_t>(r.spec.NumElements()), r.spec.dtype, plan.prescale);
    in = buf;
  }
  const size_t mine = counts[comm_->rank()];
  result->data.resize(mine * esize);
  result->shape = WithFirstDim(r.spec, d0 / size + (comm_->rank() < d0 % size ? 1 : 0));
  HORA_RETURN_IF_ERROR(comm_->Reducescatter(in, result->data.data(), counts, r.spec.dtype,
                                            ReductionOp(plan.op)));
  ScaleInPlace(result->data.data(), mine, r.spec.dtype, FinalPostscale(plan.op, plan.postscale, size));
  return Status::Ok();
}

Status BucketExecutor::RunAlltoall(const BucketPlan& plan, const Request& r, OpResult* result) {
  const int size = comm_->size();
  const auto& recv = plan.entries[0].recv_splits;
  if (static_cast<int>(recv.size()) != size) {
    return Internal("alltoall plan has " + std::to_string(recv.size()) + " receive splits");
  }
  const int64_t d0 = r.spec.shape.empty() ? 0 : r.spec.shape[0];
  std::vector<int64_t> send = r.spec.splits;
  if (send.empty()) send.assign(size, d0 / size);
  const size_t row_bytes = static_cast<size_t>(r.spec.RowElements()) * DataTypeSize(r.spec.dtype);
  std::vector<size_t> send_bytes(size), recv_bytes(size);
  int64_t rows = 0;
  for (int i = 0; i < size; ++i) {
    send_bytes[i] = static_cast<size_t>(send[i]) * row_bytes;
    recv_bytes[i] = static_cast<size_t>(recv[i]) * row_bytes;
    rows += recv[i];
  }
  result->data.resize(static_cast<size_t>(rows) * row_bytes);
  result->shape = WithFirstDim(r.spec, rows);
  result->splits = recv;
  return comm_->Alltoallv(r.input, send_bytes, result->data.data(), recv_bytes);
}

}  // namespace hora
