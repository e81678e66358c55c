// Internal to collectives/nccl: collectives/device.h for CUDA, over the statically linked CUDA
// runtime. CudaDeviceOps enqueues on one NCCL communicator's stream.
#ifndef HORA_COLLECTIVES_NCCL_CUDA_DEVICE_H_
#define HORA_COLLECTIVES_NCCL_CUDA_DEVICE_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <vector>

#include "collectives/cuda/batch_copy.h"
#include "collectives/device.h"

namespace hora {

// The process-wide CUDA runtime (registered for Device::kCuda by nccl_backend.cc).
const DeviceRuntime* CudaRuntime();

class CudaEvent : public DeviceEvent {
 public:
  explicit CudaEvent(cudaEvent_t e) : event_(e) {}
  ~CudaEvent() override;
  cudaEvent_t event() const { return event_; }

 private:
  cudaEvent_t event_;
};

class CudaDeviceOps : public DeviceOps {
 public:
  CudaDeviceOps(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  StatusOr<void*> Allocate(size_t bytes) override;
  void Free(void* ptr) override;
  Status WaitEvent(const DeviceEvent& event) override;
  Status ScaleCopy(const std::vector<DeviceCopySpan>& spans, DataType dtype, double scale) override;
  Status Zero(void* dst, size_t bytes) override;

 private:
  const int device_;
  const cudaStream_t stream_;                  // the communicator's; not owned
  std::unique_ptr<cuda::BatchCopier> copier_;  // created on the first ScaleCopy
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_NCCL_CUDA_DEVICE_H_
