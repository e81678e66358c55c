// Internal to collectives/nccl: the state an NCCL communicator shares with its Works, and
// the error and wait helpers (see nccl_communicator.h for the rules they implement).
#ifndef HORA_COLLECTIVES_NCCL_NCCL_STATE_H_
#define HORA_COLLECTIVES_NCCL_NCCL_STATE_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <string>

#include "collectives/cuda/cuda_device.h"
#include "collectives/cuda/event_work.h"
#include "collectives/nccl/nccl_loader.h"
#include "common/mutex.h"
#include "common/status.h"
#include "common/types.h"

namespace hora {

// Shared by the communicator and every Work of its Fence(): a Work may outlive the
// communicator's last call (never the process).
class NcclState : public EventWorkSource {
 public:
  NcclState(const NcclApi* api, int rank, int size, int device, std::chrono::milliseconds timeout)
      : api_(api), rank_(rank), size_(size), device_(device), timeout_(timeout) {}
  ~NcclState()
      override;  // finalizes and destroys the communicator (or aborts it), frees the stream

  const NcclApi& api() const { return *api_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  cudaStream_t stream() const { return stream_; }

  // Creation, by the creating thread before any other use.
  Status Init(const ncclUniqueId& id);

  // Runs `call(comm)` (one NCCL call on the communicator, or a group of them) under the lock,
  // then waits (the lock released between polls) until the communicator is no longer
  // ncclInProgress. An error or the timeout aborts; the sticky error is returned.
  template <typename F>
  Status Issue(const char* what, F call) {
    {
      MutexLock lock(&mu_);
      if (comm_ == nullptr) return reason_;
      const ncclResult_t r = call(comm_);
      if (r != ncclSuccess && r != ncclInProgress) {
        Status s = ErrorLocked(r, what);
        AbortLocked(s);
        return s;
      }
    }
    return WaitReady(what, std::chrono::steady_clock::now() + timeout_);
  }

  // Polls the communicator once: OK (ready), IN_PROGRESS as `*busy`, or the error (the
  // communicator is then aborted).
  Status Poll(const char* what, bool* busy);
  Status WaitReady(const char* what, std::chrono::steady_clock::time_point deadline);

  // Aborts the NCCL communicator (idempotent; the first reason sticks).
  void Abort(const Status& reason) override;
  bool aborted() const override { return aborted_.load(std::memory_order_acquire); }
  Status reason() const override;
  // NCCL's asynchronous error, for the Works of Fence().
  Status PollErrors() override {
    bool busy = false;
    return Poll("collective", &busy);
  }

 private:
  Status ErrorLocked(ncclResult_t r, const std::string& what) REQUIRES(mu_);
  void AbortLocked(const Status& reason) REQUIRES(mu_);

  const NcclApi* const api_;
  const int rank_;
  const int size_;
  const int device_;
  const std::chrono::milliseconds timeout_;
  cudaStream_t stream_ = nullptr;  // set by Init

  mutable Mutex mu_;
  ncclComm_t comm_ GUARDED_BY(mu_) = nullptr;  // null once aborted or before Init
  Status reason_ GUARDED_BY(mu_) = FailedPrecondition("the NCCL communicator is not initialized");
  std::atomic<bool> aborted_{false};
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_NCCL_NCCL_STATE_H_
