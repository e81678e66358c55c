#include "runtime/bucket_executor.h"

#include <cstring>

#include "common/copy.h"
#include "common/mutex.h"
#include "common/reduce.h"
#include "runtime/bucket_layout.h"

namespace hora {
namespace {

// Where a result of `bytes` bytes goes: the caller's buffer when it gave one of exactly that
// size (Request::output_bytes; the result is then placed), else the result's own data.
void* ResultBuffer(const Request& r, size_t bytes, OpResult* result) {
  if (r.output_bytes != 0 && r.output_bytes == bytes) {
    result->placed = r.output;
    result->placed_bytes = bytes;
    return r.output;
  }
  result->data.resize(bytes);
  return result->data.data();
}

}  // namespace

BucketExecutor::BucketExecutor(Communicator* comm) : comm_(comm), device_(comm->device_ops()) {
  if (device_ != nullptr) device_pool_ = std::make_unique<DeviceFusionPool>(device_);
}

FusionPool::Lease FusionPool::Acquire(size_t bytes) {
  MutexLock lock(&mu_);
  cv_.Wait(&mu_, [&] {
    mu_.AssertHeld();
    return !free_.empty() || created_ < kMaxBuffers;
  });
  std::unique_ptr<std::vector<char>> buf;
  if (!free_.empty()) {
    buf = std::move(free_.back());
    free_.pop_back();
  } else {
    buf = std::make_unique<std::vector<char>>();
    ++created_;
  }
  lock.Unlock();
  if (buf->size() < bytes) buf->resize(bytes);
  return Lease(buf.release(), [this](std::vector<char>* b) { Return(b); });
}

void FusionPool::Return(std::vector<char>* buffer) {
  {
    MutexLock lock(&mu_);
    free_.emplace_back(buffer);
  }
  cv_.NotifyOne();
}

Status BucketExecutor::Start(const BucketPlan& plan, const std::vector<const Request*>& requests,
                             std::vector<OpResult>* results, Finish* finish,
                             int64_t* collective_us) {
  results->assign(plan.entries.size(), OpResult());
  *finish = nullptr;
  collective_us_ = collective_us;
  if (device_ != nullptr) return StartDevice(plan, requests, results, finish);
  switch (plan.collective) {
    case CollectiveType::kAllreduce:
      return StartAllreduce(plan, requests, finish);
    case CollectiveType::kBroadcast:
      return StartBroadcast(plan, requests, finish);
    case CollectiveType::kBarrier:
      MarkCollective();
      return comm_->Barrier();
    default:
      break;
  }
  // The remaining collectives are never fused and never run for a joined rank.
  if (plan.entries.size() != 1 || requests[0] == nullptr) {
    return Internal("bucket " + std::to_string(plan.seq) + " of " +
                    CollectiveName(plan.collective) + " must hold exactly one tensor of this rank");
  }
  switch (plan.collective) {
    case CollectiveType::kAllgather:
      return StartAllgather(plan, *requests[0], &(*results)[0]);
    case CollectiveType::kReducescatter:
      return StartReducescatter(plan, *requests[0], &(*results)[0], finish);
    case CollectiveType::kAlltoall:
      return StartAlltoall(plan, *requests[0], &(*results)[0]);
    case CollectiveType::kSend:
    case CollectiveType::kRecv:
      return StartSendRecv(plan, *requests[0]);
    default:
      return Internal("unknown collective in bucket " + std::to_string(plan.seq));
  }
}

Status BucketExecutor::StartAllreduce(const BucketPlan& plan,
                                      const std::vector<const Request*>& requests, Finish* finish) {
  const size_t esize = DataTypeSize(plan.dtype);
  const Postscale post = FinalPostscale(plan.op, plan.postscale, comm_->size());
  const ReduceOp op = ReductionOp(plan.op);
  const DataType dtype = plan.dtype;
  if (plan.entries.size() == 1 && requests[0] != nullptr) {
    const Request& r = *requests[0];
    const size_t n = static_cast<size_t>(plan.entries[0].num_elements);
    ScaleCopy(r.output, r.input, n, dtype, plan.prescale);
    MarkCollective();
    if (comm_->folds_postscale()) return comm_->AllreduceScaled(r.output, n, dtype, op, post);
    HORA_RETURN_IF_ERROR(comm_->Allreduce(r.output, n, dtype, op));
    void* out = r.output;
    if (!post.identity()) {
      *finish = [out, n, dtype, post] {
        ScaleInPlace(out, n, dtype, post);
        return Status::Ok();
      };
    }
    return Status::Ok();
  }
  size_t total = 0;
  for (const auto& e : plan.entries) total += static_cast<size_t>(e.num_elements);
  FusionPool::Lease lease = pool_.Acquire(total * esize);
  char* buf = lease->data();
  size_t off = 0;
  std::vector<std::pair<void*, size_t>> outs;  // (output, elements) per entry; null if joined
  outs.reserve(plan.entries.size());
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const size_t n = static_cast<size_t>(plan.entries[i].num_elements);
    if (requests[i] == nullptr) {
      std::memset(buf + off * esize, 0, n * esize);
      outs.emplace_back(nullptr, n);
    } else {
      ScaleCopy(buf + off * esize, requests[i]->input, n, dtype, plan.prescale);
      outs.emplace_back(requests[i]->output, n);
    }
    off += n;
  }
  MarkCollective();
  Postscale copy_out = post;  // what the copy-out applies
  if (comm_->folds_postscale()) {
    HORA_RETURN_IF_ERROR(comm_->AllreduceScaled(buf, total, dtype, op, post));
    copy_out = Postscale();  // done: the copy-out only copies
  } else {
    HORA_RETURN_IF_ERROR(comm_->Allreduce(buf, total, dtype, op));
  }
  *finish = [lease, outs = std::move(outs), esize, dtype, post = copy_out] {
    size_t off = 0;
    for (const auto& [out, n] : outs) {
      if (out != nullptr) ScaleCopy(out, lease->data() + off * esize, n, dtype, post);
      off += n;
    }
    return Status::Ok();
  };
  return Status::Ok();
}

Status BucketExecutor::StartBroadcast(const BucketPlan& plan,
                                      const std::vector<const Request*>& requests, Finish* finish) {
  for (const Request* r : requests) {
    if (r == nullptr) return Internal("broadcast bucket with a joined rank");
  }
  if (requests.size() == 1) {
    MarkCollective();
    return comm_->Broadcast(requests[0]->output, requests[0]->spec.ByteSize(), plan.root);
  }
  size_t total = 0;
  for (const Request* r : requests) total += r->spec.ByteSize();
  FusionPool::Lease lease = pool_.Acquire(total);
  char* buf = lease->data();
  const bool root = comm_->rank() == plan.root;
  std::vector<std::pair<void*, size_t>> outs;
  size_t off = 0;
  for (const Request* r : requests) {
    if (root) CopyBytes(buf + off, r->output, r->spec.ByteSize());
    outs.emplace_back(r->output, r->spec.ByteSize());
    off += r->spec.ByteSize();
  }
  MarkCollective();
  HORA_RETURN_IF_ERROR(comm_->Broadcast(buf, total, plan.root));
  if (root) return Status::Ok();
  *finish = [lease, outs = std::move(outs)] {
    size_t off = 0;
    for (const auto& [out, bytes] : outs) {
      if (bytes > 0) CopyBytes(out, lease->data() + off, bytes);
      off += bytes;
    }
    return Status::Ok();
  };
  return Status::Ok();
}

Status BucketExecutor::StartAllgather(const BucketPlan& plan, const Request& r, OpResult* result) {
  auto layout = AllgatherLayout(plan, r.spec, comm_->size());
  if (!layout.ok()) return layout.status();
  const RowLayout& l = layout.value();
  result->shape = WithFirstDim(r.spec, l.rows);
  void* out = ResultBuffer(r, l.out_bytes, result);
  MarkCollective();
  return comm_->Allgatherv(r.input, out, l.recv_bytes);
}

Status BucketExecutor::StartReducescatter(const BucketPlan& plan, const Request& r,
                                          OpResult* result, Finish* finish) {
  const int size = comm_->size();
  const std::vector<size_t> counts = ReducescatterCounts(r.spec, size);
  const DataType dtype = r.spec.dtype;
  const void* in = r.input;
  FusionPool::Lease lease;
  if (plan.prescale != 1.0) {
    lease = pool_.Acquire(r.spec.ByteSize());
    ScaleCopy(lease->data(), r.input, static_cast<size_t>(r.spec.NumElements()), dtype,
              plan.prescale);
    in = lease->data();
  }
  const size_t mine = counts[comm_->rank()];
  const size_t mine_bytes = mine * DataTypeSize(dtype);
  void* out = ResultBuffer(r, mine_bytes, result);
  result->shape = WithFirstDim(r.spec, ReducescatterRows(r.spec, size, comm_->rank()));
  MarkCollective();
  HORA_RETURN_IF_ERROR(comm_->Reducescatter(in, out, counts, dtype, ReductionOp(plan.op)));
  const Postscale post = FinalPostscale(plan.op, plan.postscale, size);
  *finish = [lease, out, mine, dtype, post] {
    ScaleInPlace(out, mine, dtype, post);
    return Status::Ok();
  };
  return Status::Ok();
}

Status BucketExecutor::StartAlltoall(const BucketPlan& plan, const Request& r, OpResult* result) {
  auto layout = AlltoallLayout(plan, r.spec, comm_->size());
  if (!layout.ok()) return layout.status();
  const RowLayout& l = layout.value();
  void* out = ResultBuffer(r, l.out_bytes, result);
  result->shape = WithFirstDim(r.spec, l.rows);
  result->splits = plan.entries[0].recv_splits;
  MarkCollective();
  return comm_->Alltoallv(r.input, l.send_bytes, out, l.recv_bytes);
}

// The pair's bucket has root = sender and participants {sender, receiver}; its seq (the
// same on both sides) is the tag, so the transfer matches nothing else.
Status BucketExecutor::StartSendRecv(const BucketPlan& plan, const Request& r) {
  if (plan.participants.size() != 2) {
    return Internal("send/recv bucket " + std::to_string(plan.seq) + " without its two ranks");
  }
  const uint32_t tag = static_cast<uint32_t>(plan.seq);
  const size_t bytes = r.spec.ByteSize();
  MarkCollective();
  if (comm_->rank() == plan.participants[0]) {
    return comm_->Send(r.input, bytes, plan.participants[1], tag);
  }
  return comm_->Recv(r.output, bytes, plan.participants[0], tag);
}

}  // namespace hora
