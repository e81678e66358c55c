#include "collectives/nccl/nccl_state.h"

#include <algorithm>
#include <thread>

namespace hora {

Status NcclState::Init(const ncclUniqueId& id) {
  HORA_RETURN_IF_ERROR(UseDevice(device_));
  cudaError_t e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (e != cudaSuccess) return CudaError(e, "cudaStreamCreateWithFlags");
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  {
    MutexLock lock(&mu_);
    ncclComm_t comm = nullptr;
    const ncclResult_t r = api_->CommInitRankConfig(&comm, size_, id, rank_, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      if (comm != nullptr) api_->CommAbort(comm);
      reason_ = ErrorLocked(r, "ncclCommInitRankConfig");
      return reason_;
    }
    comm_ = comm;
    reason_ = Status::Ok();
  }
  return WaitReady("ncclCommInitRankConfig", std::chrono::steady_clock::now() + timeout_);
}

NcclState::~NcclState() {
  if (UseDevice(device_).ok()) {
    ncclComm_t comm = nullptr;
    {
      MutexLock lock(&mu_);
      comm = comm_;
    }
    if (comm != nullptr) {
      // Finalize flushes what was issued (non-blocking: poll until done); past the timeout
      // (a peer that is gone) abort instead of hanging the destructor.
      bool clean = false;
      const ncclResult_t fin = api_->CommFinalize(comm);
      if (fin == ncclSuccess || fin == ncclInProgress) {
        const auto deadline = std::chrono::steady_clock::now() + timeout_;
        for (;;) {
          ncclResult_t state = ncclSuccess;
          if (api_->CommGetAsyncError(comm, &state) != ncclSuccess) break;
          if (state == ncclSuccess) {
            clean = true;
            break;
          }
          if (state != ncclInProgress || std::chrono::steady_clock::now() > deadline) break;
          std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
      }
      if (clean) {
        api_->CommDestroy(comm);
      } else {
        api_->CommAbort(comm);
      }
    }
  }
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

Status NcclState::ErrorLocked(ncclResult_t r, const std::string& what) {
  std::string detail = api_->GetErrorString(r);
  const char* last = api_->GetLastError(comm_);
  if (last != nullptr && *last != '\0') detail += std::string(" (") + last + ")";
  const std::string message = "NCCL " + what + " failed on rank " + std::to_string(rank_) + " of " +
                              std::to_string(size_) + " (CUDA device " + std::to_string(device_) +
                              "): " + detail;
  switch (r) {
    case ncclRemoteError:
    case ncclSystemError:
      return PeerFailure(message);
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return InvalidArgument(message);
    default:
      return Internal(message);
  }
}

Status NcclState::Poll(const char* what, bool* busy) {
  *busy = false;
  MutexLock lock(&mu_);
  if (comm_ == nullptr) return reason_;
  ncclResult_t state = ncclSuccess;
  ncclResult_t r = api_->CommGetAsyncError(comm_, &state);
  if (r == ncclSuccess) r = state;
  if (r == ncclSuccess) return Status::Ok();
  if (r == ncclInProgress) {
    *busy = true;
    return Status::Ok();
  }
  Status s = ErrorLocked(r, what);
  AbortLocked(s);
  return s;
}

Status NcclState::WaitReady(const char* what, std::chrono::steady_clock::time_point deadline) {
  auto pause = std::chrono::microseconds(0);
  for (;;) {
    bool busy = false;
    HORA_RETURN_IF_ERROR(Poll(what, &busy));
    if (!busy) return Status::Ok();
    if (std::chrono::steady_clock::now() > deadline) {
      Status s =
          DeadlineExceeded("NCCL " + std::string(what) + " on rank " + std::to_string(rank_) +
                           " did not finish within " + std::to_string(timeout_.count()) +
                           " ms (a peer that stopped or died?)");
      Abort(s);
      return reason();
    }
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
  }
}

void NcclState::AbortLocked(const Status& reason) {
  if (aborted_.load(std::memory_order_relaxed)) return;
  reason_ = reason;
  aborted_.store(true, std::memory_order_release);
  if (comm_ != nullptr) {
    // Ends kernels that wait for a peer; the communicator is gone afterwards.
    api_->CommAbort(comm_);
    comm_ = nullptr;
  }
}

void NcclState::Abort(const Status& reason) {
  MutexLock lock(&mu_);
  AbortLocked(reason);
}

Status NcclState::reason() const {
  MutexLock lock(&mu_);
  return reason_;
}

}  // namespace hora
