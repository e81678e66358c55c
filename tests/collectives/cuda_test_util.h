// Device buffers, streams and a bounded stream wait for the CUDA tests (tagged gpu) and the
// bench.
#ifndef HORA_TESTS_COLLECTIVES_CUDA_TEST_UTIL_H_
#define HORA_TESTS_COLLECTIVES_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

#include "collectives/cuda/cuda_error.h"
#include "common/status.h"

namespace hora {
namespace testing {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    status_ = cuda::CudaStatus(cudaMalloc(&p_, bytes == 0 ? 1 : bytes), "cudaMalloc");
  }
  ~DeviceBuffer() {
    if (p_ != nullptr) (void)cudaFree(p_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  unsigned char* get() const { return static_cast<unsigned char*>(p_); }
  size_t bytes() const { return bytes_; }
  const Status& status() const { return status_; }

 private:
  void* p_ = nullptr;
  size_t bytes_;
  Status status_;
};

class Stream {
 public:
  Stream() {
    status_ =
        cuda::CudaStatus(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate");
  }
  ~Stream() {
    if (s_ != nullptr) (void)cudaStreamDestroy(s_);
  }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  const Status& status() const { return status_; }

 private:
  cudaStream_t s_ = nullptr;
  Status status_;
};

// Until the stream's work is done, or DEADLINE_EXCEEDED after `deadline`.
inline Status SyncBounded(cudaStream_t s, std::chrono::milliseconds deadline) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return Status::Ok();
    if (e != cudaErrorNotReady) return cuda::CudaStatus(e, "cudaStreamQuery");
    if (std::chrono::steady_clock::now() > end) {
      return DeadlineExceeded("the stream's work did not finish within " +
                              std::to_string(deadline.count()) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_CUDA_TEST_UTIL_H_
