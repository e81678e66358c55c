#include "collectives/cuda/cuda_device.h"

#include <mutex>

namespace hora {

Status CudaError(cudaError_t e, const std::string& what) {
  return Internal(what + ": " + cudaGetErrorString(e));
}

Status UseDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return Status::Ok();
  const cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it
    return FailedPrecondition("cudaSetDevice(" + std::to_string(device) +
                              "): " + cudaGetErrorString(e));
  }
  return Status::Ok();
}

Status ScopedDevice::Enter(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  if (current == device) return Status::Ok();
  HORA_RETURN_IF_ERROR(UseDevice(device));
  previous_ = current;
  return Status::Ok();
}

ScopedDevice::~ScopedDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

namespace {

class CudaRuntimeImpl : public DeviceRuntime {
 public:
  Status Probe(int index) const override {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      return FailedPrecondition(std::string("this process has no usable CUDA device: "
                                            "cudaGetDeviceCount says ") +
                                cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
    }
    if (index < 0 || index >= n) {
      return InvalidArgument("CUDA device " + std::to_string(index) +
                             " does not exist: " + "cudaGetDeviceCount says " + std::to_string(n));
    }
    return Status::Ok();
  }

  std::string Describe() const override {
    int runtime = 0, driver = 0, n = 0;
    cudaRuntimeGetVersion(&runtime);
    std::string s = "CUDA runtime " + std::to_string(runtime / 1000) + "." +
                    std::to_string(runtime % 1000 / 10) + " (static)";
    if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0) {
      s += ", driver " + std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
    } else {
      s += ", no driver";
    }
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();
      s += std::string(", no usable device (cudaGetDeviceCount: ") + cudaGetErrorName(e) + ": " +
           cudaGetErrorString(e) + ")";
    } else {
      s += ", " + std::to_string(n) + " device" + (n == 1 ? "" : "s");
    }
    return s;
  }

  StatusOr<std::shared_ptr<DeviceEvent>> RecordEvent(int index, void* stream) const override {
    ScopedDevice scope;
    HORA_RETURN_IF_ERROR(scope.Enter(index));
    cudaEvent_t e = nullptr;
    cudaError_t r = cudaEventCreateWithFlags(&e, cudaEventDisableTiming);
    if (r != cudaSuccess) return CudaError(r, "cudaEventCreateWithFlags");
    auto event = std::make_shared<CudaEvent>(e);
    r = cudaEventRecord(e, static_cast<cudaStream_t>(stream));
    if (r != cudaSuccess) return CudaError(r, "cudaEventRecord on the framework's stream");
    return std::shared_ptr<DeviceEvent>(std::move(event));
  }

  // cudaMemcpy would not do: device to device it returns before the copy is done, and it
  // is ordered only with the legacy default stream, not with a framework's own stream.
  Status Copy(int index, void* dst, const void* src, size_t bytes, void* stream) const override {
    if (bytes == 0) return Status::Ok();
    ScopedDevice scope;
    HORA_RETURN_IF_ERROR(scope.Enter(index));
    auto s = static_cast<cudaStream_t>(stream);
    cudaError_t r = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s);
    if (r != cudaSuccess) return CudaError(r, "cudaMemcpyAsync of a result");
    r = cudaStreamSynchronize(s);
    if (r != cudaSuccess) return CudaError(r, "cudaStreamSynchronize after a result's copy");
    return Status::Ok();
  }

  // Device memory from CUDA's stream-ordered allocator where the device has memory pools:
  // cudaFree would synchronize the whole device (and stall the framework thread that releases
  // a result), cudaFreeAsync does not. Allocations and frees go through a private stream of
  // the device; an allocation is synchronized on it before use, so any stream may use it, and
  // a free happens only once the memory is idle (its bucket's Work is done, a result copied).
  StatusOr<void*> Allocate(int index, size_t bytes) const override {
    ScopedDevice scope;
    HORA_RETURN_IF_ERROR(scope.Enter(index));
    void* p = nullptr;
    const size_t n = bytes == 0 ? 1 : bytes;
    cudaStream_t pool = PoolStream(index);
    cudaError_t r = cudaSuccess;
    if (pool != nullptr) {
      r = cudaMallocAsync(&p, n, pool);
      if (r == cudaSuccess) r = cudaStreamSynchronize(pool);
    } else {
      r = cudaMalloc(&p, n);
    }
    if (r != cudaSuccess) {
      cudaGetLastError();
      return CudaError(r, "allocating " + std::to_string(bytes) + " bytes on CUDA device " +
                              std::to_string(index));
    }
    return p;
  }

  void Free(int index, void* ptr) const override {
    // A failure (the process is exiting) leaks nothing that outlives the process.
    ScopedDevice scope;
    if (ptr == nullptr || !scope.Enter(index).ok()) return;
    cudaStream_t pool = PoolStream(index);
    if (pool != nullptr) {
      cudaFreeAsync(ptr, pool);
    } else {
      cudaFree(ptr);
    }
  }

 private:
  static constexpr int kMaxDevices = 64;
  struct PerDevice {
    std::once_flag once;
    cudaStream_t stream = nullptr;  // null: no memory pools (or no stream): plain cudaMalloc
  };

  // The device's private allocation stream, or null (the choice is made once per device, so
  // a pointer is always freed the way it was allocated). The caller made `index` current.
  cudaStream_t PoolStream(int index) const {
    if (index < 0 || index >= kMaxDevices) return nullptr;
    PerDevice& d = devices_[index];
    std::call_once(d.once, [&] {
      int pools = 0;
      if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, index) != cudaSuccess ||
          pools == 0 ||
          cudaStreamCreateWithFlags(&d.stream, cudaStreamNonBlocking) != cudaSuccess) {
        cudaGetLastError();
        d.stream = nullptr;
      }
    });
    return d.stream;
  }

  mutable PerDevice devices_[kMaxDevices];
};

}  // namespace

const DeviceRuntime* CudaRuntime() {
  static const CudaRuntimeImpl* runtime = new CudaRuntimeImpl();
  return runtime;
}

static const bool hora_cuda_runtime_registered [[maybe_unused]] =
    RegisterDeviceRuntime(Device::kCuda, CudaRuntime());

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) cudaEventDestroy(event_);
}

StatusOr<void*> CudaDeviceOps::Allocate(size_t bytes) {
  return CudaRuntime()->Allocate(device_, bytes);
}

void CudaDeviceOps::Free(void* ptr) { CudaRuntime()->Free(device_, ptr); }

Status CudaDeviceOps::WaitEvent(const DeviceEvent& event) {
  const auto* e = dynamic_cast<const CudaEvent*>(&event);
  if (e == nullptr) return Internal("a device event that is not a CUDA event");
  HORA_RETURN_IF_ERROR(UseDevice(device_));
  const cudaError_t r = cudaStreamWaitEvent(stream_, e->event(), 0);
  if (r != cudaSuccess) return CudaError(r, "cudaStreamWaitEvent");
  return Status::Ok();
}

Status CudaDeviceOps::ScaleCopy(const std::vector<DeviceCopySpan>& spans, DataType dtype,
                                double scale) {
  // One batched launch (collectives/cuda/batch_copy.h) for every span; spans that would copy
  // a buffer onto itself unscaled are dropped.
  std::vector<cuda::CopySpan> batch;
  batch.reserve(spans.size());
  for (const DeviceCopySpan& s : spans) {
    if (s.count == 0 || (s.src == s.dst && scale == 1.0)) continue;
    batch.push_back({s.src, s.dst, s.count});
  }
  if (batch.empty()) return Status::Ok();
  if (!copier_) {
    auto created = cuda::BatchCopier::Create(device_);
    if (!created.ok()) return created.status();
    copier_ = std::move(created).value();
  }
  return copier_->Copy(batch, dtype, scale, stream_);
}

Status CudaDeviceOps::Zero(void* dst, size_t bytes) {
  if (bytes == 0) return Status::Ok();
  HORA_RETURN_IF_ERROR(UseDevice(device_));
  const cudaError_t r = cudaMemsetAsync(dst, 0, bytes, stream_);
  if (r != cudaSuccess) return CudaError(r, "cudaMemsetAsync");
  return Status::Ok();
}

}  // namespace hora
