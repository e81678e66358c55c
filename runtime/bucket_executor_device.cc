// BucketExecutor on a device communicator: every step is enqueued on the communicator's
// stream, in order, so nothing here waits for the device. The stream first waits for each
// request's `ready` event (the framework's stream at enqueue time); the communicator's
// Fence(), taken by the caller after Start, then covers packing, the collective and
// unpacking, and `finish` only returns the fusion buffer.
#include "collectives/device.h"
#include "common/reduce.h"
#include "runtime/bucket_executor.h"
#include "runtime/bucket_layout.h"

namespace hora {
namespace {

char* At(void* base, size_t offset) { return static_cast<char*>(base) + offset; }

}  // namespace

Status BucketExecutor::StartDevice(const BucketPlan& plan,
                                   const std::vector<const Request*>& requests,
                                   std::vector<OpResult>* results, Finish* finish) {
  for (const Request* r : requests) {
    if (r != nullptr && r->ready) HORA_RETURN_IF_ERROR(device_->WaitEvent(*r->ready));
  }
  switch (plan.collective) {
    case CollectiveType::kAllreduce:
      return DeviceAllreduce(plan, requests, finish);
    case CollectiveType::kBroadcast:
      return DeviceBroadcast(plan, requests, finish);
    case CollectiveType::kBarrier:
      MarkCollective();
      return comm_->Barrier();
    default:
      break;
  }
  if (plan.entries.size() != 1 || requests[0] == nullptr) {
    return Internal("bucket " + std::to_string(plan.seq) + " of " +
                    CollectiveName(plan.collective) + " must hold exactly one tensor of this rank");
  }
  const Request& r = *requests[0];
  switch (plan.collective) {
    case CollectiveType::kAllgather:
      return DeviceAllgather(plan, r, &(*results)[0]);
    case CollectiveType::kReducescatter:
      return DeviceReducescatter(plan, r, &(*results)[0], finish);
    case CollectiveType::kAlltoall:
      return DeviceAlltoall(plan, r, &(*results)[0]);
    case CollectiveType::kSend:
    case CollectiveType::kRecv: {
      if (plan.participants.size() != 2) {
        return Internal("send/recv bucket " + std::to_string(plan.seq) + " without its two ranks");
      }
      const uint32_t tag = static_cast<uint32_t>(plan.seq);
      MarkCollective();
      if (comm_->rank() == plan.participants[0]) {
        return comm_->Send(r.input, r.spec.ByteSize(), plan.participants[1], tag);
      }
      return comm_->Recv(r.output, r.spec.ByteSize(), plan.participants[0], tag);
    }
    default:
      return Internal("unknown collective in bucket " + std::to_string(plan.seq));
  }
}

Status BucketExecutor::DeviceAllreduce(const BucketPlan& plan,
                                       const std::vector<const Request*>& requests,
                                       Finish* finish) {
  const size_t esize = DataTypeSize(plan.dtype);
  const double post = FinalPostscale(plan.op, plan.postscale, comm_->size()).AsFactor();
  const ReduceOp op = ReductionOp(plan.op);
  const DataType dtype = plan.dtype;
  if (plan.entries.size() == 1 && requests[0] != nullptr) {
    const Request& r = *requests[0];
    const size_t n = static_cast<size_t>(plan.entries[0].num_elements);
    if (plan.prescale != 1.0 || r.output != r.input) {
      HORA_RETURN_IF_ERROR(device_->ScaleCopy({{r.input, r.output, n}}, dtype, plan.prescale));
    }
    MarkCollective();
    HORA_RETURN_IF_ERROR(comm_->Allreduce(r.output, n, dtype, op));
    if (post != 1.0) return device_->ScaleCopy({{r.output, r.output, n}}, dtype, post);
    return Status::Ok();
  }
  size_t total = 0;
  for (const auto& e : plan.entries) total += static_cast<size_t>(e.num_elements);
  auto lease = device_pool_->Acquire(total * esize);
  if (!lease.ok()) return lease.status();
  void* buf = lease.value()->ptr;
  // Held until the bucket's Work is done, also when a step below fails after enqueueing.
  *finish = [held = lease.value()] { return Status::Ok(); };
  std::vector<DeviceCopySpan> pack, unpack;
  size_t off = 0;
  for (size_t i = 0; i < plan.entries.size(); ++i) {
    const size_t n = static_cast<size_t>(plan.entries[i].num_elements);
    if (requests[i] == nullptr) {
      HORA_RETURN_IF_ERROR(device_->Zero(At(buf, off * esize), n * esize));  // joined
    } else {
      pack.push_back({requests[i]->input, At(buf, off * esize), n});
      unpack.push_back({At(buf, off * esize), requests[i]->output, n});
    }
    off += n;
  }
  HORA_RETURN_IF_ERROR(device_->ScaleCopy(pack, dtype, plan.prescale));
  MarkCollective();
  HORA_RETURN_IF_ERROR(comm_->Allreduce(buf, total, dtype, op));
  return device_->ScaleCopy(unpack, dtype, post);
}

Status BucketExecutor::DeviceBroadcast(const BucketPlan& plan,
                                       const std::vector<const Request*>& requests,
                                       Finish* finish) {
  for (const Request* r : requests) {
    if (r == nullptr) return Internal("broadcast bucket with a joined rank");
  }
  if (requests.size() == 1) {
    MarkCollective();
    return comm_->Broadcast(requests[0]->output, requests[0]->spec.ByteSize(), plan.root);
  }
  size_t total = 0;
  for (const Request* r : requests) total += r->spec.ByteSize();
  auto lease = device_pool_->Acquire(total);
  if (!lease.ok()) return lease.status();
  void* buf = lease.value()->ptr;
  *finish = [held = lease.value()] { return Status::Ok(); };  // see DeviceAllreduce
  const bool root = comm_->rank() == plan.root;
  std::vector<DeviceCopySpan> spans;
  size_t off = 0;
  for (const Request* r : requests) {
    const size_t bytes = r->spec.ByteSize();
    if (root)
      spans.push_back({r->output, At(buf, off), bytes});
    else
      spans.push_back({At(buf, off), r->output, bytes});
    off += bytes;
  }
  if (root) HORA_RETURN_IF_ERROR(device_->ScaleCopy(spans, DataType::kUint8, 1.0));
  MarkCollective();
  HORA_RETURN_IF_ERROR(comm_->Broadcast(buf, total, plan.root));
  if (!root) return device_->ScaleCopy(spans, DataType::kUint8, 1.0);
  return Status::Ok();
}

StatusOr<void*> BucketExecutor::DeviceResult(const Request& r, size_t bytes, OpResult* result) {
  const DeviceRuntime* runtime = DeviceRuntimeFor(r.spec.device);
  if (runtime == nullptr) return Internal("a device bucket without a device runtime");
  const int index = r.spec.device_index;
  auto p = runtime->Allocate(index, bytes);
  if (!p.ok()) return p.status();
  result->device_data =
      std::shared_ptr<void>(p.value(), [runtime, index](void* q) { runtime->Free(index, q); });
  result->device_bytes = bytes;
  result->device_index = index;
  result->device_stream = r.stream;
  return p.value();
}

Status BucketExecutor::DeviceAllgather(const BucketPlan& plan, const Request& r, OpResult* result) {
  auto layout = AllgatherLayout(plan, r.spec, comm_->size());
  if (!layout.ok()) return layout.status();
  const RowLayout& l = layout.value();
  auto out = DeviceResult(r, l.out_bytes, result);
  if (!out.ok()) return out.status();
  result->shape = WithFirstDim(r.spec, l.rows);
  MarkCollective();
  return comm_->Allgatherv(r.input, out.value(), l.recv_bytes);
}

Status BucketExecutor::DeviceReducescatter(const BucketPlan& plan, const Request& r,
                                           OpResult* result, Finish* finish) {
  const int size = comm_->size();
  const std::vector<size_t> counts = ReducescatterCounts(r.spec, size);
  const DataType dtype = r.spec.dtype;
  const void* in = r.input;
  DeviceFusionPool::Lease lease;
  if (plan.prescale != 1.0) {
    auto got = device_pool_->Acquire(r.spec.ByteSize());
    if (!got.ok()) return got.status();
    lease = std::move(got).value();
    *finish = [held = lease] { return Status::Ok(); };  // see DeviceAllreduce
    HORA_RETURN_IF_ERROR(device_->ScaleCopy(
        {{r.input, lease->ptr, static_cast<size_t>(r.spec.NumElements())}}, dtype, plan.prescale));
    in = lease->ptr;
  }
  const size_t mine = counts[comm_->rank()];
  auto out = DeviceResult(r, mine * DataTypeSize(dtype), result);
  if (!out.ok()) return out.status();
  result->shape = WithFirstDim(r.spec, ReducescatterRows(r.spec, size, comm_->rank()));
  MarkCollective();
  HORA_RETURN_IF_ERROR(comm_->Reducescatter(in, out.value(), counts, dtype, ReductionOp(plan.op)));
  const double post = FinalPostscale(plan.op, plan.postscale, size).AsFactor();
  if (post != 1.0) return device_->ScaleCopy({{out.value(), out.value(), mine}}, dtype, post);
  return Status::Ok();
}

Status BucketExecutor::DeviceAlltoall(const BucketPlan& plan, const Request& r, OpResult* result) {
  auto layout = AlltoallLayout(plan, r.spec, comm_->size());
  if (!layout.ok()) return layout.status();
  const RowLayout& l = layout.value();
  auto out = DeviceResult(r, l.out_bytes, result);
  if (!out.ok()) return out.status();
  result->shape = WithFirstDim(r.spec, l.rows);
  result->splits = plan.entries[0].recv_splits;
  MarkCollective();
  return comm_->Alltoallv(r.input, l.send_bytes, out.value(), l.recv_bytes);
}

}  // namespace hora
