#include "runtime/process_set.h"

#include <algorithm>

#include "common/logging.h"
#include "common/mutex.h"
#include "common/thread_name.h"

namespace hora {

// A bucket between its start and its completion.
struct ProcessSetRuntime::InFlight {
  std::vector<Request> owned;     // this rank's requests, in entry order (joined: absent)
  std::vector<size_t> slot;       // per entry: index into owned, or SIZE_MAX
  std::vector<OpResult> results;  // per entry
  BucketExecutor::Finish finish;
  std::unique_ptr<TimelineBucket> timeline;  // while the timeline is on
};

ProcessSetRuntime::ProcessSetRuntime(int32_t id, std::vector<int> ranks, int global_rank,
                                     Host* host, CompletionQueue* completion, Timeline* timeline)
    : id_(id),
      ranks_(std::move(ranks)),
      rank_([&] {
        auto it = std::find(ranks_.begin(), ranks_.end(), global_rank);
        return it == ranks_.end() ? -1 : static_cast<int>(it - ranks_.begin());
      }()),
      host_(host),
      completion_(completion),
      timeline_(timeline) {}

ProcessSetRuntime::~ProcessSetRuntime() { Stop(); }

std::string ProcessSetRuntime::backend() const { return cpu_ ? cpu_->name() : ""; }

void ProcessSetRuntime::Start(std::unique_ptr<Communicator> cpu, SteadyPath::Parts steady,
                              SteadyOptions steady_options) {
  HORA_CHECK(included() && !thread_.joinable());
  cpu_ = std::move(cpu);
  executor_ = std::make_unique<BucketExecutor>(cpu_.get());
  if (steady.board) {
    SteadyPath::Host h;
    h.take = [this](int32_t id) { return host_->TakeRequest(id); };
    h.complete = [this](int64_t handle, Status status, OpResult result) {
      host_->Complete(handle, std::move(status), std::move(result));
    };
    h.job_error = [this] { return host_->JobError(); };
    h.bucket_failed = [this](const Status& s) { return host_->BucketFailed(s); };
    h.fail_job = [this](const Status& s) { return host_->FailJob(s); };
    h.give_back = [this](Request r, bool announce) { host_->GiveBack(std::move(r), announce); };
    h.queued = [this](const TensorSpec& spec) { return host_->Queued(spec); };
    steady_ = std::make_unique<SteadyPath>(id_, ranks_, std::move(steady), std::move(h),
                                           steady_options, timeline_);
  }
  thread_ = std::thread([this] {
    SetThreadName(("hora-set-" + std::to_string(id_)).c_str());
    Loop();
  });
}

void ProcessSetRuntime::Push(std::vector<BucketPlan> buckets) {
  {
    MutexLock lock(&mu_);
    if (stop_) return;
    for (BucketPlan& b : buckets) inbox_.push_back(std::move(b));
  }
  cv_.NotifyAll();
}

void ProcessSetRuntime::Abort(const Status& reason) {
  if (cpu_) cpu_->Abort(reason);
  MutexLock lock(&devices_mu_);
  for (auto& [key, d] : devices_) {
    if (d.comm) d.comm->Abort(reason);
  }
  if (steady_) steady_->Abort(reason);
}

bool ProcessSetRuntime::Drain(std::chrono::milliseconds timeout) {
  MutexLock lock(&mu_);
  return cv_.WaitFor(&mu_, timeout, [&] {
    mu_.AssertHeld();
    return inbox_.empty() && !running_ && outstanding_ == 0;
  });
}

void ProcessSetRuntime::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    inbox_.clear();
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  if (steady_) steady_->Stop();
  {
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [&] {
      mu_.AssertHeld();
      return outstanding_ == 0;
    });
  }
  MutexLock lock(&devices_mu_);
  for (auto& [key, d] : devices_) d.executor.reset();
  devices_.clear();
}

Status ProcessSetRuntime::Select(const BucketPlan& bucket,
                                 const std::vector<const Request*>& requests, Communicator** comm,
                                 BucketExecutor** executor) {
  *comm = cpu_.get();
  *executor = executor_.get();
  if (bucket.device == Device::kCpu) return Status::Ok();
  // The device of this rank's first tensor; a rank that joined every entry uses the device
  // of the set's existing communicator for the kind, else index 0.
  int index = -1;
  for (const Request* r : requests) {
    if (r != nullptr) {
      index = r->spec.device_index;
      break;
    }
  }
  const int kind = static_cast<int>(bucket.device);
  MutexLock lock(&devices_mu_);
  if (index < 0) {
    index = 0;
    for (const auto& [key, d] : devices_) {
      if (key.first == kind && d.comm) {
        index = key.second;
        break;
      }
    }
  }
  auto it = devices_.find({kind, index});
  if (it == devices_.end()) {
    int ordinal = 0;
    for (const auto& [key, d] : devices_) ordinal += key.first == kind ? 1 : 0;
    lock.Unlock();  // creation is collective and slow; Abort must not wait for it
    DeviceComm d;
    auto created =
        host_->CreateDeviceCommunicator(id_, ranks_, rank_, bucket.device, index, ordinal);
    if (created.ok()) {
      d.comm = std::move(created).value();
      d.executor = std::make_unique<BucketExecutor>(d.comm.get());
      Status job = host_->JobError();
      if (!job.ok()) d.comm->Abort(job);  // an abort that came during the creation
    } else {
      d.failed = created.status();
    }
    lock.Lock();
    it = devices_.emplace(std::make_pair(kind, index), std::move(d)).first;
  }
  if (!it->second.comm) return it->second.failed;
  *comm = it->second.comm.get();
  *executor = it->second.executor.get();
  return Status::Ok();
}

void ProcessSetRuntime::Loop() {
  for (;;) {
    BucketPlan bucket;
    {
      MutexLock lock(&mu_);
      cv_.Wait(&mu_, [&] {
        mu_.AssertHeld();
        return stop_ || !inbox_.empty();
      });
      if (stop_) return;
      bucket = std::move(inbox_.front());
      inbox_.pop_front();
      running_ = true;
    }
    Run(bucket);
    {
      MutexLock lock(&mu_);
      running_ = false;
    }
    cv_.NotifyAll();
  }
}

void ProcessSetRuntime::Run(const BucketPlan& bucket) {
  auto f = std::make_shared<InFlight>();
  if (timeline_ != nullptr && timeline_->on()) {
    f->timeline = std::make_unique<TimelineBucket>();
    f->timeline->start_us = TimelineNowUs();
    f->timeline->process_set = id_;
    f->timeline->seq = bucket.seq;
  }
  f->slot.assign(bucket.entries.size(), SIZE_MAX);
  f->owned.reserve(bucket.entries.size());
  for (size_t i = 0; i < bucket.entries.size(); ++i) {
    const int32_t id = bucket.entries[i].id;
    if (id < 0) continue;  // this rank joined
    std::optional<Request> r = host_->TakeRequest(id);
    if (!r) {
      // Fail what was taken; the job is broken (the ranks' queues disagree with the plan).
      Finish(f, Internal("the coordinator planned tensor id " + std::to_string(id) +
                         " in process "
                         "set " +
                         std::to_string(id_) + ", which this rank has not submitted"));
      return;
    }
    f->slot[i] = f->owned.size();
    f->owned.push_back(std::move(*r));
  }
  std::vector<const Request*> requests(bucket.entries.size(), nullptr);
  for (size_t i = 0; i < f->slot.size(); ++i) {
    if (f->slot[i] != SIZE_MAX) requests[i] = &f->owned[f->slot[i]];
  }
  Communicator* comm = nullptr;
  BucketExecutor* executor = nullptr;
  Status status = host_->JobError();
  if (status.ok()) status = Select(bucket, requests, &comm, &executor);
  if (!status.ok()) {
    Finish(f, std::move(status));
    return;
  }
  int64_t* collective_us = nullptr;
  if (f->timeline) {
    TraceStart(bucket, requests, f->timeline.get(), comm);
    collective_us = &f->timeline->collective_us;
  }
  status = executor->Start(bucket, requests, &f->results, &f->finish, collective_us);
  // A device communicator enqueued the work: even a failed Start may have queued some, so
  // the buffers wait for its Fence.
  std::unique_ptr<Work> work =
      status.ok() || comm->device_ops() != nullptr ? comm->Fence() : nullptr;
  if (!work) {
    Finish(f, std::move(status));
    return;
  }
  {
    MutexLock lock(&mu_);
    ++outstanding_;
  }
  // A failed Start on a device communicator: wait for what it queued (bounded by the Work),
  // then fail with Start's error.
  completion_->Add(std::move(work), [this, f, status](Status s) {
    Finish(f, status.ok() ? std::move(s) : status);
    // Notified under the lock: Stop() (the destructor) returns once it sees outstanding_ == 0,
    // and a notify after the unlock could reach a destroyed cv_ (ThreadSanitizer found it).
    MutexLock lock(&mu_);
    --outstanding_;
    cv_.NotifyAll();
  });
}

void ProcessSetRuntime::TraceStart(const BucketPlan& bucket,
                                   const std::vector<const Request*>& requests, TimelineBucket* t,
                                   const Communicator* comm) const {
  t->process_set = id_;
  t->seq = bucket.seq;
  t->collective = bucket.collective;
  t->backend = comm->name();
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i] == nullptr) continue;  // this rank joined
    const BucketPlan::Entry& e = bucket.entries[i];
    const int64_t bytes = static_cast<int64_t>(requests[i]->spec.ByteSize());
    t->tensors.push_back({requests[i]->handle, bytes, e.last_rank, e.lag_us, e.wait_us});
    t->bytes += bytes;
  }
}

void ProcessSetRuntime::Finish(const std::shared_ptr<InFlight>& f, Status status) {
  if (f->timeline) f->timeline->collective_done_us = TimelineNowUs();
  if (status.ok() && f->finish) status = f->finish();
  f->finish = nullptr;  // releases the fusion buffer
  if (f->timeline) f->timeline->unpacked_us = TimelineNowUs();
  if (!status.ok()) {
    Status job = host_->JobError();
    status = job.ok() ? host_->BucketFailed(status) : job;
  }
  if (f->timeline) {
    // Recorded before the handles complete, so that a StopTimeline right after a wait
    // returned still finds the bucket.
    f->timeline->completed_us = TimelineNowUs();
    if (!status.ok()) f->timeline->error = status.message();
    timeline_->BucketDone(std::move(*f->timeline));
    f->timeline.reset();
  }
  for (size_t i = 0; i < f->slot.size(); ++i) {
    if (f->slot[i] == SIZE_MAX) continue;
    host_->Complete(f->owned[f->slot[i]].handle, status,
                    status.ok() ? std::move(f->results[i]) : OpResult());
  }
}

}  // namespace hora
