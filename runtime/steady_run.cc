// The steady path's execution of one fast instance (runtime/steady_path.h): on the steady
// communicator through a BucketExecutor, or, for an eager instance, from the board.
#include "common/reduce.h"
#include "runtime/steady_path.h"

namespace hora {
namespace {
using Clock = std::chrono::steady_clock;
}  // namespace

void SteadyPath::RunGroup(std::vector<Claim>* group) {
  // The same buckets on every member: each member's group holds the same instances in the
  // same order, with the same specs (each equalled its entry's to be offered).
  auto spec = [](const Claim& c) -> const TensorSpec& { return c.pending.request.spec; };
  auto fuses = [&](const Claim& c) {
    return c.held && c.pending.fuses && !c.pending.eager &&
           spec(c).collective == CollectiveType::kAllreduce &&
           spec(c).ByteSize() <= options_.fuse_tensor_bytes;
  };
  std::vector<Claim>& g = *group;
  for (size_t i = 0; i < g.size();) {
    size_t j = i + 1;
    if (fuses(g[i])) {
      const TensorSpec& first = spec(g[i]);
      int64_t bytes = static_cast<int64_t>(first.ByteSize());
      for (; j < g.size() && fuses(g[j]); ++j) {
        const TensorSpec& next = spec(g[j]);
        bytes += static_cast<int64_t>(next.ByteSize());
        if (bytes > options_.fusion_bytes || next.dtype != first.dtype || next.op != first.op ||
            next.prescale != first.prescale || next.postscale != first.postscale) {
          break;
        }
      }
    }
    Run(&g[i], j - i);
    i = j;
  }
}

void SteadyPath::Run(Claim* claims, size_t count) {
  std::optional<Request> taken;  // a claim not held: the engine's queue holds its request
  if (!claims[0].held) {
    taken = host_.take(claims[0].pending.id);
    if (!taken) return;  // failed meanwhile with the job's error
  }
  std::vector<const Request*>& requests = run_requests_;  // no allocation per instance
  requests.clear();
  for (size_t i = 0; i < count; ++i) {
    requests.push_back(claims[i].held ? &claims[i].pending.request : &*taken);
  }
  const Request& r = *requests[0];
  std::unique_ptr<TimelineBucket> trace;
  if (timeline_ != nullptr && timeline_->on()) {
    trace = std::make_unique<TimelineBucket>();
    trace->start_us = TimelineNowUs();
    trace->process_set = process_set_;
    trace->seq = fast_seq_;
    trace->steady = true;
    trace->collective = r.spec.collective;
    trace->backend = std::string("steady:") + board_->name();
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < count; ++i) {
      const Clock::time_point offered = claims[i].pending.deadline - options_.patience;
      const int64_t waited = std::max<int64_t>(
          0, std::chrono::duration_cast<std::chrono::microseconds>(now - offered).count());
      const int m = claims[i].last;
      const int last = m >= 0 && m < static_cast<int>(ranks_.size()) ? ranks_[m] : -1;
      const int64_t bytes = static_cast<int64_t>(requests[i]->spec.ByteSize());
      trace->bytes += bytes;
      trace->tensors.push_back({requests[i]->handle, bytes, last, waited, waited});
    }
  }
  ++fast_seq_;
  BucketExecutor::Finish finish;
  std::vector<OpResult>& results = run_results_;  // the executor's, one per entry
  results.clear();
  Status status = host_.job_error();
  if (status.ok() && count == 1 && claims[0].pending.eager) {
    if (trace) trace->collective_us = TimelineNowUs();
    results.resize(1);
    status = RunEager(claims[0].entry, claims[0].pending.instance, r, &results[0]);
  } else if (status.ok() && !executor_) {
    status = Internal("steady path: an instance of '" + r.spec.name + "' is not Eager on the " +
                      board_->name() + " board, which runs only Eager ones");
  } else if (status.ok()) {
    // The plan the coordinator would send for it (Learn cached it from such plans).
    BucketPlan plan;
    plan.process_set = process_set_;
    plan.collective = r.spec.collective;
    plan.dtype = r.spec.dtype;  // the spec it offered, which equalled the entry's
    plan.op = r.spec.op;
    plan.device = Device::kCpu;
    plan.prescale = r.spec.prescale;
    plan.postscale = r.spec.postscale;
    plan.root = r.spec.root;
    for (size_t i = 0; i < count; ++i) {
      BucketPlan::Entry pe;
      pe.id = claims[i].pending.id;
      pe.num_elements = requests[i]->spec.NumElements();
      if (r.spec.collective == CollectiveType::kAllgather) {
        pe.first_dims = claims[i].dims;  // the learned plan's: every member's spec is its own
      } else if (r.spec.collective == CollectiveType::kAlltoall) {
        pe.recv_splits = claims[i].dims;
      }
      plan.entries.push_back(std::move(pe));
    }
    status = executor_->Start(plan, requests, &results, &finish,
                              trace ? &trace->collective_us : nullptr);
  }
  if (trace) trace->collective_done_us = TimelineNowUs();
  if (status.ok() && finish) status = finish();
  finish = nullptr;
  if (trace) trace->unpacked_us = TimelineNowUs();
  if (!status.ok()) {
    Status job = host_.job_error();
    status = job.ok() ? host_.bucket_failed(status) : job;
  } else {
    fast_.fetch_add(static_cast<int64_t>(count), std::memory_order_relaxed);
    if (count > 1) fused_.fetch_add(static_cast<int64_t>(count), std::memory_order_relaxed);
  }
  if (trace) {  // before the handles complete (as ProcessSetRuntime::Finish)
    trace->completed_us = TimelineNowUs();
    if (!status.ok()) trace->error = status.message();
    timeline_->BucketDone(std::move(*trace));
  }
  results.resize(count);
  for (size_t i = 0; i < count; ++i) {
    host_.complete(requests[i]->handle, status, std::move(results[i]));
  }
}

Status SteadyPath::RunEager(uint32_t e, uint32_t n, const Request& r, OpResult* result) {
  const size_t count = static_cast<size_t>(r.spec.NumElements());
  const size_t bytes = r.spec.ByteSize();
  const DataType dtype = r.spec.dtype;
  const int members = static_cast<int>(ranks_.size());
  auto get = [&](int m, void* dst) {
    if (board_->GetEager(e, n, m, dst, bytes)) return Status::Ok();
    return Internal("steady path: member " + std::to_string(m) + "'s input of instance " +
                    std::to_string(n) + " of '" + r.spec.name +
                    "' was overwritten before this rank read it (a rank went on past a failure)");
  };
  switch (r.spec.collective) {
    case CollectiveType::kAllgather: {
      result->data.resize(bytes * static_cast<size_t>(members));
      for (int m = 0; m < members; ++m) HORA_RETURN_IF_ERROR(get(m, &result->data[m * bytes]));
      result->shape = r.spec.shape;
      result->shape[0] *= members;
      return Status::Ok();
    }
    case CollectiveType::kBroadcast:  // the root's own copy is its input again
      return get(r.spec.root, r.output);
    default:
      break;
  }
  const ReduceOp op = ReductionOp(r.spec.op);
  void* peer = eager_peer_.data();
  // Every member reduces in member order, so every member's result is the same bit for bit.
  for (int m = 0; m < members; ++m) {
    void* dst = m == 0 ? r.output : peer;
    HORA_RETURN_IF_ERROR(get(m, dst));
    if (r.spec.prescale != 1.0) ScaleInPlace(dst, count, dtype, r.spec.prescale);
    if (m > 0) ReduceInto(r.output, peer, count, dtype, op);
  }
  const Postscale post = FinalPostscale(r.spec.op, r.spec.postscale, members);
  if (!post.identity()) ScaleInPlace(r.output, count, dtype, post);
  return Status::Ok();
}

}  // namespace hora
