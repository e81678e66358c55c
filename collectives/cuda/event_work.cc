#include "collectives/cuda/event_work.h"

#include "collectives/cuda/cuda_device.h"
#include "common/mutex.h"

namespace hora {
namespace {

class EventWork : public Work {
 public:
  EventWork(std::shared_ptr<EventWorkSource> source, cudaEvent_t event, EventWorkInfo info)
      : source_(std::move(source)),
        event_(event),
        info_(std::move(info)),
        deadline_(std::chrono::steady_clock::now() + info_.timeout) {}
  ~EventWork() override { cudaEventDestroy(event_); }

  bool Test(Status* status) override {
    MutexLock lock(&mu_);
    if (!done_) Check();
    if (done_) *status = result_;
    return done_;
  }

 private:
  void Finish(Status s) REQUIRES(mu_) {
    done_ = true;
    result_ = std::move(s);
  }
  void Check() REQUIRES(mu_) {
    if (source_->aborted()) return Finish(source_->reason());
    const cudaError_t e = cudaEventQuery(event_);
    // Abort sets the flag before it ends kernels: a flag still clear after the event
    // completed means the kernels finished on their own; the backend may still have an
    // error recorded for them (NCCL: a peer that failed mid-collective).
    if (e == cudaSuccess) {
      if (source_->aborted()) return Finish(source_->reason());
      return Finish(source_->PollErrors());
    }
    if (e != cudaErrorNotReady) {
      source_->Abort(CudaError(e, info_.what));
      return Finish(source_->reason());
    }
    Status s = source_->PollErrors();
    if (!s.ok()) return Finish(s);
    if (std::chrono::steady_clock::now() > deadline_) {
      source_->Abort(DeadlineExceeded(info_.what + " did not complete within " +
                                      std::to_string(info_.timeout.count()) + " ms" + info_.hint));
      return Finish(source_->reason());
    }
  }

  const std::shared_ptr<EventWorkSource> source_;
  const cudaEvent_t event_;
  const EventWorkInfo info_;
  const std::chrono::steady_clock::time_point deadline_;
  Mutex mu_;
  bool done_ GUARDED_BY(mu_) = false;
  Status result_ GUARDED_BY(mu_);
};

class FailedWork : public Work {
 public:
  explicit FailedWork(Status s) : status_(std::move(s)) {}
  bool Test(Status* status) override {
    *status = status_;
    return true;
  }

 private:
  const Status status_;
};

}  // namespace

std::unique_ptr<Work> MakeEventWork(std::shared_ptr<EventWorkSource> source, cudaEvent_t event,
                                    EventWorkInfo info) {
  return std::make_unique<EventWork>(std::move(source), event, std::move(info));
}

std::unique_ptr<Work> MakeFailedWork(Status status) {
  return std::make_unique<FailedWork>(std::move(status));
}

std::unique_ptr<Work> FenceStream(const std::shared_ptr<EventWorkSource>& source,
                                  cudaStream_t stream, EventWorkInfo info) {
  if (source->aborted()) return MakeFailedWork(source->reason());
  cudaEvent_t e = nullptr;
  cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
  if (r == cudaSuccess) r = cudaEventRecord(e, stream);
  if (r != cudaSuccess) {
    cudaGetLastError();
    if (e != nullptr) cudaEventDestroy(e);
    source->Abort(CudaError(r, "recording the event of " + info.what));
    return MakeFailedWork(source->reason());
  }
  return MakeEventWork(source, e, std::move(info));
}

}  // namespace hora
