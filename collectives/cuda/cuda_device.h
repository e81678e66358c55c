// collectives/device.h for CUDA, over the statically linked CUDA runtime, for the backends
// that serve CUDA tensors (nccl/, staged/): the process-wide DeviceRuntime (registered for
// Device::kCuda by this library), DeviceOps that enqueue on one communicator's stream, and
// the device and error helpers they share.
#ifndef HORA_COLLECTIVES_CUDA_CUDA_DEVICE_H_
#define HORA_COLLECTIVES_CUDA_CUDA_DEVICE_H_

#include <cuda_runtime_api.h>

#include <memory>
#include <string>
#include <vector>

#include "collectives/cuda/batch_copy.h"
#include "collectives/device.h"

namespace hora {

// "cudaMalloc: out of memory".
Status CudaError(cudaError_t e, const std::string& what);
// Makes `device` current on the calling thread (a no-op when it is): for Hora's own threads.
Status UseDevice(int device);

// Makes `device` current for a scope and restores the caller's device afterwards: for calls
// on the framework's threads (enqueue, result copies, frees), whose current device belongs to
// the framework (CUDA's current device is per thread and shared by every CUDA runtime in the
// process, torch's included).
class ScopedDevice {
 public:
  ScopedDevice() = default;
  ~ScopedDevice();
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;
  Status Enter(int device);

 private:
  int previous_ = -1;
};

// The process-wide CUDA runtime (registered for Device::kCuda by cuda_device.cc).
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

#endif  // HORA_COLLECTIVES_CUDA_CUDA_DEVICE_H_
