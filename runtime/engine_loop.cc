// The Engine's request path: enqueue, plan delivery, the control thread. Announcements to the
// coordinator: engine_announce.cc.
#include <sched.h>

#include <chrono>

#include "collectives/device.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/reduce.h"
#include "runtime/engine.h"

namespace hora {

void Engine::BackgroundLoop() {
  for (;;) {
    std::deque<std::pair<int32_t, int>> joins;
    Status error;
    bool announce = false;
    {
      MutexLock lock(&mu_);
      const bool armed = hold_armed_;
      auto ready = [&] {
        mu_.AssertHeld();
        return stop_ || !join_done_.empty() || (!error_.ok() && !error_handled_) || announce_now_ ||
               hold_armed_ != armed;
      };
      if (armed) {
        cv_.WaitUntil(&mu_, hold_deadline_, ready);
      } else {
        cv_.Wait(&mu_, ready);
      }
      if (stop_) return;
      if (hold_armed_ && (announce_now_ || std::chrono::steady_clock::now() >= hold_deadline_)) {
        hold_armed_ = announce_now_ = false;
        holding_.store(false, std::memory_order_release);
        announce = true;
      }
      joins.swap(join_done_);
      error = error_;
      if (!error.ok()) error_handled_ = true;
    }
    if (announce) AnnounceFresh();
    if (!error.ok()) {
      std::vector<std::shared_ptr<ProcessSetRuntime>> sets;
      {
        MutexLock lock(&sets_mu_);
        for (auto& [id, set] : sets_) sets.push_back(set);
      }
      for (auto& set : sets) set->Abort(error);
      if (peers_) peers_->Abort(error);
      FailEverything(error);
      continue;
    }
    for (const auto& [set, last_rank] : joins) {
      int64_t handle = 0;
      {
        MutexLock lock(&mu_);
        auto it = join_handles_.find(set);
        if (it != join_handles_.end()) {
          handle = it->second;
          join_handles_.erase(it);
        }
      }
      OpResult result;
      result.join_rank = last_rank;
      if (handle != 0) handles_.Complete(handle, Status::Ok(), std::move(result));
    }
  }
}

void Engine::OnPlan(PlanMessage plan) {
  Answered(plan);
  if (timeline_.on()) {
    std::vector<std::pair<int32_t, uint64_t>> buckets;
    buckets.reserve(plan.buckets.size());
    for (const BucketPlan& b : plan.buckets) buckets.emplace_back(b.process_set, b.seq);
    timeline_.Planned(buckets, TimelineNowUs());
  }
  for (const TensorErrorNotice& e : plan.errors) {
    if (auto r = TakeRequest(e.id)) handles_.Complete(r->handle, e.status);
  }
  std::map<int32_t, std::pair<std::shared_ptr<ProcessSetRuntime>, std::vector<BucketPlan>>> by_set;
  for (BucketPlan& bucket : plan.buckets) {
    std::shared_ptr<ProcessSetRuntime> set = FindSet(bucket.process_set);
    if (!set || !set->included()) {
      SetError(Internal("the coordinator sent a bucket of process set " +
                        std::to_string(bucket.process_set) +
                        ", which this rank is not a member of"));
      return;
    }
    if (SteadyPath* steady = set->steady()) LearnSteady(steady, bucket);
    if (bucket.inline_reduced) {
      CompleteInline(bucket, set->size());
    } else {
      auto& entry = by_set[bucket.process_set];
      entry.first = set;
      entry.second.push_back(std::move(bucket));
    }
  }
  for (auto& [id, entry] : by_set) entry.first->Push(std::move(entry.second));
}

void Engine::LearnSteady(SteadyPath* steady, const BucketPlan& bucket) {
  // Copies: the specs of ids in this bucket do not change before its requests finish.
  std::vector<TensorSpec> specs;
  std::vector<bool> have;
  {
    MutexLock lock(&announce_mu_);
    for (const BucketPlan::Entry& e : bucket.entries) {
      auto it = e.id < 0 ? id_specs_.end() : id_specs_.find(static_cast<uint32_t>(e.id));
      have.push_back(it != id_specs_.end());
      specs.push_back(have.back() ? it->second : TensorSpec());
    }
  }
  std::vector<const TensorSpec*> pointers;
  for (size_t i = 0; i < specs.size(); ++i) pointers.push_back(have[i] ? &specs[i] : nullptr);
  steady->Learn(bucket, pointers);
}

void Engine::GiveBack(Request request, bool announce) {
  const int64_t handle = request.handle;
  const TensorKey key = TensorKeyOf(request.spec);
  if (Status s = queue_.Push(std::move(request), announce); !s.ok()) {
    handles_.Complete(handle, s);  // the steady path checked the name: not expected
    return;
  }
  if (announce) Announce();
  // FailEverything (a job error, Shutdown) may have passed the queue before the push: what
  // is still there fails here.
  if (halted_.load(std::memory_order_seq_cst)) {
    Status error = AsyncError();
    if (auto r = queue_.Take(key))
      handles_.Complete(r->handle, error.ok() ? ShutDownStatus() : error);
  }
}

bool Engine::Queued(const TensorSpec& spec) { return queue_.Contains(TensorKeyOf(spec)); }

void Engine::CompleteInline(const BucketPlan& bucket, int set_size) {
  const Postscale post = FinalPostscale(bucket.op, bucket.postscale, set_size);
  Status error = AsyncError();
  std::unique_ptr<TimelineBucket> trace;
  if (timeline_.on()) {
    trace = std::make_unique<TimelineBucket>();
    trace->start_us = TimelineNowUs();
    trace->process_set = bucket.process_set;
    trace->seq = bucket.seq;
    trace->collective = bucket.collective;
    trace->backend = "coordinator";
    trace->inline_reduced = true;
  }
  std::vector<int64_t> done;
  done.reserve(bucket.entries.size());
  for (const BucketPlan::Entry& e : bucket.entries) {
    if (e.id < 0) continue;  // this rank joined
    std::optional<Request> r = TakeRequest(e.id);
    if (!r) continue;
    if (error.ok()) {
      ScaleCopy(r->output, e.inline_result.data(), static_cast<size_t>(e.num_elements),
                bucket.dtype, post);
    }
    if (trace) {
      const int64_t bytes = static_cast<int64_t>(r->spec.ByteSize());
      trace->tensors.push_back({r->handle, bytes, e.last_rank, e.lag_us, e.wait_us});
      trace->bytes += bytes;
    }
    done.push_back(r->handle);
  }
  if (trace) {  // before the handles complete (see ProcessSetRuntime::Finish)
    trace->completed_us = TimelineNowUs();
    if (!error.ok()) trace->error = error.message();
    timeline_.BucketDone(std::move(*trace));
  }
  for (int64_t handle : done) handles_.Complete(handle, error);
}

Status Engine::Refuse(TensorSpec spec, const Status& why) {
  HORA_RETURN_IF_ERROR(ValidateIdentity(spec));
  const Status refused(why.code(), "rank " + std::to_string(options_.rank) + ": " + why.message());
  {
    MutexLock lock(&mu_);
    if (!error_.ok() || stop_) return refused;
  }
  // What the coordinator needs to parse and pair the notice; the other fields do not matter.
  if (!IsValidDataType(static_cast<int32_t>(spec.dtype))) spec.dtype = DataType::kUint8;
  if (!IsValidReduceOp(static_cast<int32_t>(spec.op))) spec.op = ReduceOp::kSum;
  spec.device = Device::kCpu;
  spec.shape.clear();
  spec.splits.clear();
  spec.refused = refused.message();
  ReadyNotice n;
  {
    MutexLock lock(&announce_mu_);
    const TensorKey key = TensorKeyOf(spec);
    auto it = ids_.find(key);
    if (it == ids_.end()) {
      n.id = next_id_++;
      ids_.emplace(key, n.id);
      id_keys_.emplace(n.id, key);
    } else {
      n.id = it->second;
    }
    id_specs_[n.id] = spec;
    n.spec = spec;
  }
  std::vector<ReadyNotice> notices;
  notices.push_back(std::move(n));
  AnnounceFresh();  // what is held goes first
  unanswered_.fetch_add(1, std::memory_order_acq_rel);
  client_->SendReady(std::move(notices));
  return refused;
}

StatusOr<int64_t> Engine::Enqueue(TensorSpec spec, const void* input, void* output, void* stream,
                                  size_t output_bytes) {
  std::shared_ptr<ProcessSetRuntime> set;
  HORA_RETURN_IF_ERROR(ValidateIdentity(spec, &set));
  return EnqueueIn(set, std::move(spec), input, output, stream, output_bytes);
}

StatusOr<int64_t> Engine::EnqueueIn(const std::shared_ptr<ProcessSetRuntime>& owner,
                                    TensorSpec spec, const void* input, void* output, void* stream,
                                    size_t output_bytes) {
  const ProcessSetRuntime& set = *owner;
  if (Status bad = ValidateSpec(spec, set, input, output); !bad.ok()) {
    return Refuse(std::move(spec), bad);
  }
  if (halted_.load(std::memory_order_acquire)) {
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (stop_) return Aborted("Hora is shutting down");
  }
  std::shared_ptr<DeviceEvent> ready;
  if (spec.device != Device::kCpu && spec.collective != CollectiveType::kBarrier) {
    // ValidateSpec found the device's runtime: the bucket's stream will wait for this event.
    auto event = DeviceRuntimeFor(spec.device)->RecordEvent(spec.device_index, stream);
    if (!event.ok()) return Refuse(std::move(spec), event.status());
    ready = std::move(event).value();
  }
  Request r;
  r.ready = std::move(ready);
  r.spec = std::move(spec);
  r.input = input;
  r.output = output;
  r.output_bytes = (r.spec.collective == CollectiveType::kAllgather ||
                    r.spec.collective == CollectiveType::kReducescatter ||
                    r.spec.collective == CollectiveType::kAlltoall) &&
                           output != nullptr && r.spec.device == Device::kCpu
                       ? output_bytes
                       : 0;
  r.stream = stream;
  r.handle = handles_.Create();
  recorder_.Enqueued(r.handle, r.spec, TimelineNowUs());
  if (timeline_.on()) timeline_.Submitted(r.handle, r.spec, TimelineNowUs());
  int64_t handle = r.handle;
  SteadyPath* steady = set.steady();
  SteadyPath::Lookup found;
  const bool cached = steady != nullptr && steady->Find(r.spec, &found);
  Status s;
  if (cached && found.matches) {
    // The steady path holds the request (runs it, or hands it back to the queue).
    SteadyPath::Ticket ticket;
    s = steady->Begin(found, &r, &ticket);
    if (s.ok() && ticket.offered) {
      // Kept until Release (the handle may be done already: Help then returns at once).
      MutexLock lock(&steady_mu_);
      steady_waits_spare_.Insert(&steady_waits_, handle, {owner, ticket});
    }
  } else if (cached && found.held) {
    s = InFlightError(TensorKeyOf(r.spec));
  } else {
    s = queue_.Push(std::move(r));
    // A cached name always counts an instance: a spec that differs is refused.
    if (s.ok() && cached) steady->Refuse(found);
    if (s.ok()) Announce();
  }
  if (!s.ok()) {
    // The handle was created above and never handed out, so Release cannot fail (its only
    // error is an unknown handle); the caller needs the refusal, not that.
    (void)handles_.Release(handle);
    return s;
  }
  return handle;
}

Status Engine::Release(int64_t handle) {
  {
    MutexLock lock(&steady_mu_);
    auto it = steady_waits_.find(handle);
    if (it != steady_waits_.end()) steady_waits_spare_.Extract(&steady_waits_, it).first.reset();
  }
  return handles_.Release(handle);
}

Status Engine::Wait(int64_t handle, std::chrono::duration<double> timeout) {
  std::shared_ptr<ProcessSetRuntime> set;
  SteadyPath::Ticket ticket;
  {
    MutexLock lock(&steady_mu_);
    // The ticket stays until the handle completes or is released: a wait in slices (Python
    // waits 0.5 s at a time) helps in every slice.
    auto it = steady_waits_.find(handle);
    if (it != steady_waits_.end()) {
      set = it->second.first;
      ticket = it->second.second;
    }
  }
  // Help returns at once for an instance that already ran or fell back (and at an abort).
  if (set != nullptr && set->steady() != nullptr) {
    // No clock read for a wait without a timeout (hora_wait(h, -1), the blocking calls).
    const bool forever = timeout.count() < 0 || timeout.count() > 1e6;
    const auto deadline =
        forever ? std::chrono::steady_clock::time_point::max()
                : std::chrono::steady_clock::now() +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
    set->steady()->Help(ticket, deadline);
    if (!forever) {
      const auto left = std::chrono::duration<double>(deadline - std::chrono::steady_clock::now());
      timeout = std::max(left, std::chrono::duration<double>(0));
    }
  }
  return handles_.Wait(handle, timeout);
}

Status Engine::Poll(int64_t handle, bool* done) {
  HORA_RETURN_IF_ERROR(handles_.Poll(handle, done));
  if (*done) return Status::Ok();
  std::shared_ptr<ProcessSetRuntime> set;
  {
    MutexLock lock(&steady_mu_);
    auto it = steady_waits_.find(handle);
    if (it == steady_waits_.end()) return Status::Ok();
    set = it->second.first;
  }
  if (set->steady() == nullptr) return Status::Ok();
  if (!set->steady()->Progress()) {
    // Nothing to run here: the instance waits for a peer. A caller spinning on poll gives
    // its core away for a moment, so that with more ranks than cores the peer (or this
    // rank's own threads) can run; a yield with nobody else to run returns at once.
    sched_yield();
    return Status::Ok();
  }
  return handles_.Poll(handle, done);
}

StatusOr<int64_t> Engine::EnqueueBarrier(int32_t process_set) {
  TensorSpec spec;
  spec.process_set = process_set;
  spec.collective = CollectiveType::kBarrier;
  spec.dtype = DataType::kUint8;
  spec.name = "hora.barrier";
  std::shared_ptr<ProcessSetRuntime> set;
  HORA_RETURN_IF_ERROR(ValidateIdentity(spec, &set));
  {
    MutexLock lock(&mu_);
    spec.name = "hora.barrier." + std::to_string(barrier_count_[process_set]++);
  }
  return EnqueueIn(set, std::move(spec), nullptr, nullptr, nullptr);
}

StatusOr<int64_t> Engine::EnqueueJoin(int32_t process_set) {
  std::shared_ptr<ProcessSetRuntime> set = FindSet(process_set);
  if (!set) {
    return InvalidArgument("join: process set " + std::to_string(process_set) + " does not exist");
  }
  if (!set->included()) {
    return InvalidArgument("join: rank " + std::to_string(options_.rank) +
                           " is not a member of process set " + std::to_string(process_set));
  }
  int64_t handle = 0;
  {
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (stop_) return Aborted("Hora is shutting down");
    if (join_handles_.count(process_set) != 0) {
      return Status(Code::kAlreadyExists,
                    "this rank has already joined process set " + std::to_string(process_set));
    }
    handle = join_handles_[process_set] = handles_.Create();
  }
  if (SteadyPath* steady = set->steady()) steady->Joined();
  AnnounceFresh();  // what is held goes before the join
  client_->SendJoin(process_set);
  return handle;
}

// A transfer of CPU tensors goes straight to its peer (runtime/peer_transfers.h); one of
// CUDA tensors through the coordinator, under its name, the same on both sides: the n-th
// transfer from s to d with tag t. A peer outside the set is this rank's error alone (nothing
// can be paired); any other bad input is refused to the peer's side too.
StatusOr<int64_t> Engine::EnqueueTransfer(TensorSpec spec, const void* input, void* output,
                                          int peer, int tag, bool send) {
  spec.collective = send ? CollectiveType::kSend : CollectiveType::kRecv;
  spec.peer = peer;
  spec.name = "hora.p2p";
  std::shared_ptr<ProcessSetRuntime> set;
  HORA_RETURN_IF_ERROR(ValidateIdentity(spec, &set));
  const int me = set->rank();
  if (peer < 0 || peer >= set->size() || peer == me) {
    return InvalidArgument(std::string(send ? "send" : "recv") + " in process set " +
                           std::to_string(spec.process_set) + ": peer " + std::to_string(peer) +
                           " is out of range [0, " + std::to_string(set->size()) +
                           ") of the set, or this rank itself");
  }
  const int from = send ? me : peer, to = send ? peer : me;
  const int64_t n = peers_->Next(spec.process_set, from, to, tag);
  spec.name = "hora.p2p." + std::to_string(from) + ">" + std::to_string(to) + ".t" +
              std::to_string(tag) + "." + std::to_string(n);  // the timeline's track too
  if (!peers_->Direct(spec)) return EnqueueIn(set, std::move(spec), input, output, nullptr);
  if (halted_.load(std::memory_order_acquire)) {  // the peer fails with the job's error too
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (stop_) return Aborted("Hora is shutting down");
  }
  if (Status bad = ValidateSpec(spec, *set, input, output); !bad.ok()) {
    peers_->Refuse(*set, peer, tag, send, n, bad);
    return bad;
  }
  const int64_t handle = handles_.Create(PeerTransfers::kWaitYieldUs);
  recorder_.Enqueued(handle, spec, TimelineNowUs());
  if (timeline_.on()) timeline_.Submitted(handle, spec, TimelineNowUs());
  peers_->Start(*set, spec, input, output, peer, tag, send, n, handle);
  return handle;
}

StatusOr<int64_t> Engine::EnqueueSend(TensorSpec spec, const void* input, int peer, int tag) {
  return EnqueueTransfer(std::move(spec), input, nullptr, peer, tag, true);
}

StatusOr<int64_t> Engine::EnqueueRecv(TensorSpec spec, void* output, int peer, int tag) {
  return EnqueueTransfer(std::move(spec), nullptr, output, peer, tag, false);
}

}  // namespace hora
