#include "collectives/staged/staged_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "collectives/cuda/cuda_device.h"
#include "collectives/cuda/event_work.h"
#include "common/mutex.h"
#include "common/types.h"

namespace hora {
namespace {

// What the communicator shares with the Works of its Fence(): whether it was aborted, and why.
class StagedState : public EventWorkSource {
 public:
  StagedState(int device, std::chrono::milliseconds timeout) : device_(device), timeout_(timeout) {}
  int device() const { return device_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  bool aborted() const override { return aborted_.load(std::memory_order_acquire); }
  Status reason() const override {
    MutexLock lock(&mu_);
    return reason_;
  }
  void Abort(const Status& reason) override {
    MutexLock lock(&mu_);
    if (aborted_.load(std::memory_order_relaxed)) return;
    reason_ = reason;
    aborted_.store(true, std::memory_order_release);
  }

  // Polls `event` until it completed: OK, the abort's reason, a CUDA error (which aborts), or
  // DEADLINE_EXCEEDED at the timeout (which aborts too). Spins briefly (a staging copy of a
  // small tensor takes microseconds), then sleeps between polls.
  Status Wait(cudaEvent_t event, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + timeout_;
    for (int polls = 0;; ++polls) {
      if (aborted()) return reason();
      const cudaError_t e = cudaEventQuery(event);
      if (e == cudaSuccess) return Status::Ok();
      if (e != cudaErrorNotReady) {
        Abort(CudaError(
            e, std::string("staged ") + what + " on CUDA device " + std::to_string(device_)));
        return reason();
      }
      const auto now = std::chrono::steady_clock::now();
      if (now > deadline) {
        Abort(DeadlineExceeded(std::string("the staged ") + what + " on CUDA device " +
                               std::to_string(device_) + " did not complete within " +
                               std::to_string(timeout_.count()) + " ms"));
        return reason();
      }
      if (now - start < std::chrono::microseconds(200)) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 10 : 200));
      }
    }
  }

 private:
  const int device_;
  const std::chrono::milliseconds timeout_;
  std::atomic<bool> aborted_{false};
  mutable Mutex mu_;
  Status reason_ GUARDED_BY(mu_);
};

// Pinned host memory that grows to the largest request (only while no copy uses it).
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }
  StatusOr<char*> Reserve(size_t bytes) {
    if (bytes <= size_ && data_ != nullptr) return data_;
    const size_t want = std::max<size_t>((bytes + (1 << 20) - 1) & ~size_t((1 << 20) - 1), 1 << 20);
    if (data_ != nullptr) cudaFreeHost(data_);
    data_ = nullptr;
    size_ = 0;
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, want, cudaHostAllocPortable);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return CudaError(e, "cudaHostAlloc of " + std::to_string(want) + " bytes of staging");
    }
    data_ = static_cast<char*>(p);
    size_ = want;
    return data_;
  }

 private:
  char* data_ = nullptr;
  size_t size_ = 0;
};

class StagedCommunicator : public Communicator {
 public:
  StagedCommunicator(std::unique_ptr<Communicator> host, const StagedConfig& config,
                     cudaStream_t down, cudaStream_t up, cudaEvent_t up_done)
      : host_(std::move(host)),
        name_(std::string("staged:") + host_->name()),
        chunks_(std::max<size_t>(config.chunks, 1)),
        min_chunk_bytes_(std::max<size_t>(config.min_chunk_bytes, 1)),
        state_(std::make_shared<StagedState>(config.device, config.timeout)),
        down_(down),
        up_(up),
        up_done_(up_done),
        ops_(config.device, down) {}

  ~StagedCommunicator() override {
    if (UseDevice(state_->device()).ok()) {
      // Copies wait for nothing but the device's own work: bounded without a deadline.
      cudaStreamSynchronize(up_);
      cudaStreamSynchronize(down_);
    }
    for (cudaEvent_t e : chunk_events_) cudaEventDestroy(e);
    cudaEventDestroy(up_done_);
    cudaStreamDestroy(up_);
    cudaStreamDestroy(down_);
  }

  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const char* name() const override { return name_.c_str(); }
  DeviceOps* device_ops() override { return &ops_; }

  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    HORA_RETURN_IF_ERROR(Begin());
    const size_t esize = DataTypeSize(dtype);
    if (count == 0 || esize == 0) return host_->Allreduce(buf, count, dtype, op);
    auto staging = in_.Reserve(count * esize);
    if (!staging.ok()) return staging.status();
    char* host = staging.value();
    char* dev = static_cast<char*>(buf);
    // At most chunks_ chunks of whole elements, each of at least min_chunk_bytes_.
    size_t per = std::max<size_t>(min_chunk_bytes_ / esize, 1);
    per = std::max(per, (count + chunks_ - 1) / chunks_);
    const size_t chunks = (count + per - 1) / per;
    HORA_RETURN_IF_ERROR(ChunkEvents(chunks));
    for (size_t k = 0; k < chunks; ++k) {
      const size_t off = k * per * esize, n = std::min(per, count - k * per) * esize;
      HORA_RETURN_IF_ERROR(
          Cuda(cudaMemcpyAsync(host + off, dev + off, n, cudaMemcpyDeviceToHost, down_),
               "cudaMemcpyAsync to the staging buffer"));
      HORA_RETURN_IF_ERROR(Cuda(cudaEventRecord(chunk_events_[k], down_), "cudaEventRecord"));
    }
    for (size_t k = 0; k < chunks; ++k) {
      const size_t first = k * per, n = std::min(per, count - first);
      HORA_RETURN_IF_ERROR(state_->Wait(chunk_events_[k], "download of an allreduce chunk"));
      HORA_RETURN_IF_ERROR(host_->Allreduce(host + first * esize, n, dtype, op));
      HORA_RETURN_IF_ERROR(Cuda(cudaMemcpyAsync(dev + first * esize, host + first * esize,
                                                n * esize, cudaMemcpyHostToDevice, up_),
                                "cudaMemcpyAsync from the staging buffer"));
    }
    return EndUploads();
  }

  Status Broadcast(void* buf, size_t bytes, int root) override {
    HORA_RETURN_IF_ERROR(Begin());
    if (bytes == 0) return host_->Broadcast(buf, 0, root);
    auto staging = in_.Reserve(bytes);
    if (!staging.ok()) return staging.status();
    const bool is_root = root == rank();
    if (is_root) HORA_RETURN_IF_ERROR(Download(staging.value(), buf, bytes, "broadcast input"));
    HORA_RETURN_IF_ERROR(host_->Broadcast(staging.value(), bytes, root));
    if (!is_root) HORA_RETURN_IF_ERROR(Upload(buf, staging.value(), bytes));
    return EndUploads();
  }

  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    HORA_RETURN_IF_ERROR(Begin());
    if (bytes.size() != static_cast<size_t>(size())) return host_->Allgatherv(in, out, bytes);
    const size_t mine = bytes[rank()];
    const size_t total = std::accumulate(bytes.begin(), bytes.end(), size_t(0));
    auto src = in_.Reserve(mine);
    auto dst = out_.Reserve(total);
    if (!src.ok()) return src.status();
    if (!dst.ok()) return dst.status();
    HORA_RETURN_IF_ERROR(Download(src.value(), in, mine, "allgather input"));
    HORA_RETURN_IF_ERROR(host_->Allgatherv(src.value(), dst.value(), bytes));
    HORA_RETURN_IF_ERROR(Upload(out, dst.value(), total));
    return EndUploads();
  }

  Status Alltoallv(const void* in, const std::vector<size_t>& send_bytes, void* out,
                   const std::vector<size_t>& recv_bytes) override {
    HORA_RETURN_IF_ERROR(Begin());
    const size_t sent = std::accumulate(send_bytes.begin(), send_bytes.end(), size_t(0));
    const size_t received = std::accumulate(recv_bytes.begin(), recv_bytes.end(), size_t(0));
    auto src = in_.Reserve(sent);
    auto dst = out_.Reserve(received);
    if (!src.ok()) return src.status();
    if (!dst.ok()) return dst.status();
    HORA_RETURN_IF_ERROR(Download(src.value(), in, sent, "alltoall input"));
    HORA_RETURN_IF_ERROR(host_->Alltoallv(src.value(), send_bytes, dst.value(), recv_bytes));
    HORA_RETURN_IF_ERROR(Upload(out, dst.value(), received));
    return EndUploads();
  }

  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& counts, DataType dtype,
                       ReduceOp op) override {
    HORA_RETURN_IF_ERROR(Begin());
    if (counts.size() != static_cast<size_t>(size())) {
      return host_->Reducescatter(in, out, counts, dtype, op);
    }
    const size_t esize = DataTypeSize(dtype);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0)) * esize;
    const size_t mine = counts[rank()] * esize;
    auto src = in_.Reserve(total);
    auto dst = out_.Reserve(mine);
    if (!src.ok()) return src.status();
    if (!dst.ok()) return dst.status();
    HORA_RETURN_IF_ERROR(Download(src.value(), in, total, "reducescatter input"));
    HORA_RETURN_IF_ERROR(host_->Reducescatter(src.value(), dst.value(), counts, dtype, op));
    HORA_RETURN_IF_ERROR(Upload(out, dst.value(), mine));
    return EndUploads();
  }

  Status Barrier() override {
    HORA_RETURN_IF_ERROR(Begin());
    return host_->Barrier();
  }

  Status Send(const void* buf, size_t bytes, int peer, uint32_t tag) override {
    HORA_RETURN_IF_ERROR(Begin());
    auto staging = in_.Reserve(bytes);
    if (!staging.ok()) return staging.status();
    HORA_RETURN_IF_ERROR(Download(staging.value(), buf, bytes, "send input"));
    return host_->Send(staging.value(), bytes, peer, tag);
  }

  Status Recv(void* buf, size_t bytes, int peer, uint32_t tag) override {
    HORA_RETURN_IF_ERROR(Begin());
    auto staging = in_.Reserve(bytes);
    if (!staging.ok()) return staging.status();
    HORA_RETURN_IF_ERROR(host_->Recv(staging.value(), bytes, peer, tag));
    HORA_RETURN_IF_ERROR(Upload(buf, staging.value(), bytes));
    return EndUploads();
  }

  std::unique_ptr<Work> Fence() override {
    if (state_->aborted()) return MakeFailedWork(state_->reason());
    Status s = UseDevice(state_->device());
    if (!s.ok()) return MakeFailedWork(s);
    return FenceStream(
        state_, down_,
        {"staged work on CUDA device " + std::to_string(state_->device()), "", state_->timeout()});
  }

  void Abort(const Status& reason) override {
    state_->Abort(reason);
    host_->Abort(reason);
  }

 private:
  // A CUDA error aborts: the stream's state is unknown afterwards.
  Status Cuda(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    cudaGetLastError();
    state_->Abort(
        CudaError(e, std::string(what) + " on CUDA device " + std::to_string(state_->device())));
    return state_->reason();
  }

  // Every call starts here: not aborted, on the device, and the staging buffers idle (the
  // uploads of the previous call, which read them, have finished).
  Status Begin() {
    if (state_->aborted()) return state_->reason();
    HORA_RETURN_IF_ERROR(UseDevice(state_->device()));
    return state_->Wait(up_done_, "upload of the previous result");
  }

  Status ChunkEvents(size_t n) {
    while (chunk_events_.size() < n) {
      cudaEvent_t e = nullptr;
      HORA_RETURN_IF_ERROR(
          Cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate"));
      chunk_events_.push_back(e);
    }
    return Status::Ok();
  }

  // Device -> staging after the stream's earlier work; waits for it on the host.
  Status Download(char* host, const void* dev, size_t bytes, const char* what) {
    if (bytes == 0) return Status::Ok();
    HORA_RETURN_IF_ERROR(ChunkEvents(1));
    HORA_RETURN_IF_ERROR(
        Cuda(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, down_), "cudaMemcpyAsync"));
    HORA_RETURN_IF_ERROR(Cuda(cudaEventRecord(chunk_events_[0], down_), "cudaEventRecord"));
    return state_->Wait(chunk_events_[0], what);
  }

  // Staging -> device, queued on the upload stream (EndUploads orders the stream after it).
  Status Upload(void* dev, const char* host, size_t bytes) {
    if (bytes == 0) return Status::Ok();
    return Cuda(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, up_), "cudaMemcpyAsync");
  }

  // The stream's later work (unpacking, the Fence) waits for the uploads queued so far.
  Status EndUploads() {
    HORA_RETURN_IF_ERROR(Cuda(cudaEventRecord(up_done_, up_), "cudaEventRecord"));
    return Cuda(cudaStreamWaitEvent(down_, up_done_, 0), "cudaStreamWaitEvent");
  }

  const std::unique_ptr<Communicator> host_;
  const std::string name_;
  const size_t chunks_;
  const size_t min_chunk_bytes_;
  const std::shared_ptr<StagedState> state_;
  const cudaStream_t down_;    // packing, downloads, unpacking; what Fence() covers
  const cudaStream_t up_;      // uploads
  const cudaEvent_t up_done_;  // recorded after the last upload
  CudaDeviceOps ops_;          // on down_
  std::vector<cudaEvent_t> chunk_events_;
  PinnedBuffer in_, out_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateStagedCommunicator(std::unique_ptr<Communicator> host,
                                                                 const StagedConfig& config) {
  if (host == nullptr) return InvalidArgument("a staged communicator without a host one");
  HORA_RETURN_IF_ERROR(CudaRuntime()->Probe(config.device));
  HORA_RETURN_IF_ERROR(UseDevice(config.device));
  cudaStream_t down = nullptr, up = nullptr;
  cudaEvent_t up_done = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&down, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&up, cudaStreamNonBlocking);
  if (e == cudaSuccess) e = cudaEventCreateWithFlags(&up_done, cudaEventDisableTiming);
  // Recorded once on the idle stream: the first Begin() finds it complete.
  if (e == cudaSuccess) e = cudaEventRecord(up_done, up);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (up_done != nullptr) cudaEventDestroy(up_done);
    if (up != nullptr) cudaStreamDestroy(up);
    if (down != nullptr) cudaStreamDestroy(down);
    return CudaError(e, "creating the staged communicator's streams on CUDA device " +
                            std::to_string(config.device));
  }
  return std::unique_ptr<Communicator>(
      new StagedCommunicator(std::move(host), config, down, up, up_done));
}

}  // namespace hora
