// BatchCopier on the CUDA runtime: validates the spans, cuts them into launches of at most
// kSlotSpans spans. A launch of at most kInlineSpans spans carries them in its parameters;
// a larger one moves its span table to the device through a ring of pinned staging slots.
//
// A slot is a pinned host table, a device table and an event. Copy() fills the host table,
// enqueues its copy to the device table, the kernel that reads it, and the event. The slot is
// filled again only once its event has completed (so its copy and its kernel are done); that
// wait is bounded by kSlotWait and fails with DEADLINE_EXCEEDED.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "collectives/cuda/batch_copy.h"
#include "collectives/cuda/batch_kernel.h"
#include "collectives/cuda/cuda_error.h"
#include "collectives/cuda/span_plan.h"
#include "common/logging.h"

namespace hora {
namespace cuda {
namespace {

constexpr size_t kSlots = 8;
constexpr uint32_t kSlotSpans = 4096;  // 128 KiB of table per slot
constexpr auto kSlotWait = std::chrono::seconds(120);

// Makes `device` current for a scope and restores the caller's device.
class DeviceScope {
 public:
  Status Enter(int device) {
    HORA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
    if (previous_ != device) {
      HORA_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
      restore_ = true;
    }
    return Status::Ok();
  }
  ~DeviceScope() {
    if (restore_) (void)cudaSetDevice(previous_);  // best effort: the caller's device
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

bool KindOf(DataType dtype, double scale, KernelKind* kind) {
  if (scale == 1.0 || dtype == DataType::kBool) {  // as ScaleCopy: bytes
    *kind = KernelKind::kCopy;
    return true;
  }
  switch (dtype) {
    case DataType::kUint8:
      *kind = KernelKind::kUint8;
      return true;
    case DataType::kInt8:
      *kind = KernelKind::kInt8;
      return true;
    case DataType::kInt16:
      *kind = KernelKind::kInt16;
      return true;
    case DataType::kUint16:
      *kind = KernelKind::kUint16;
      return true;
    case DataType::kInt32:
      *kind = KernelKind::kInt32;
      return true;
    case DataType::kInt64:
      *kind = KernelKind::kInt64;
      return true;
    case DataType::kFloat16:
      *kind = KernelKind::kFloat16;
      return true;
    case DataType::kBfloat16:
      *kind = KernelKind::kBfloat16;
      return true;
    case DataType::kFloat32:
      *kind = KernelKind::kFloat32;
      return true;
    case DataType::kFloat64:
      *kind = KernelKind::kFloat64;
      return true;
    case DataType::kBool:
      break;
  }
  return false;
}

class CudaBatchCopier : public BatchCopier {
 public:
  // `sms`: the device's multiprocessors.
  CudaBatchCopier(int device, int sms) : device_(device), sms_(sms > 0 ? sms : 1) {}

  ~CudaBatchCopier() override {
    DeviceScope scope;
    if (!scope.Enter(device_).ok()) return;
    for (Slot& slot : slots_) {
      Status s = WaitSlot(slot);
      if (!s.ok()) HORA_LOG_WARN("BatchCopier: freeing a staging slot: {}", s.ToString());
      // cudaFreeHost and cudaFree synchronize with the device before freeing.
      if (slot.done != nullptr) (void)cudaEventDestroy(slot.done);
      if (slot.host != nullptr) (void)cudaFreeHost(slot.host);
      if (slot.dev != nullptr) (void)cudaFree(slot.dev);
    }
  }

  Status Init() {
    DeviceScope scope;
    HORA_RETURN_IF_ERROR(scope.Enter(device_));
    for (Slot& slot : slots_) {
      void* p = nullptr;
      HORA_CUDA_RETURN_IF_ERROR(cudaMallocHost(&p, kSlotSpans * sizeof(DeviceSpan)));
      slot.host = static_cast<DeviceSpan*>(p);
      HORA_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, kSlotSpans * sizeof(DeviceSpan)));
      slot.dev = static_cast<DeviceSpan*>(p);
      HORA_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&slot.done, cudaEventDisableTiming));
    }
    return Status::Ok();
  }

  Status Copy(const std::vector<CopySpan>& spans, DataType dtype, double scale,
              void* stream) override {
    HORA_RETURN_IF_ERROR(broken_);
    if (!IsValidDataType(static_cast<int32_t>(dtype))) {
      return InvalidArgument("BatchCopier::Copy: invalid dtype " +
                             std::to_string(static_cast<int32_t>(dtype)));
    }
    KernelKind kind;
    if (!KindOf(dtype, scale, &kind)) {
      return InvalidArgument(std::string("BatchCopier::Copy: cannot scale dtype ") +
                             DataTypeName(dtype));
    }
    // The table counts elements of the kernel's size: bytes for a plain copy.
    const uint64_t per_elem = kind == KernelKind::kCopy ? DataTypeSize(dtype) : 1;
    const uint32_t esize = KernelElementSize(kind);
    uint64_t total_bytes = 0;
    for (size_t i = 0; i < spans.size(); ++i) {
      const CopySpan& s = spans[i];
      if (s.count == 0) continue;
      if (s.src == nullptr || s.dst == nullptr) {
        return InvalidArgument("BatchCopier::Copy: span " + std::to_string(i) +
                               " has a null pointer and " + std::to_string(s.count) + " elements");
      }
      if (s.count > UINT64_MAX / DataTypeSize(dtype) ||
          PlanSpan(reinterpret_cast<uintptr_t>(s.src), reinterpret_cast<uintptr_t>(s.dst),
                   s.count * per_elem, esize, kMaxChunkBytes)
                  .chunks > kMaxChunksPerLaunch) {
        return InvalidArgument("BatchCopier::Copy: span " + std::to_string(i) + " of " +
                               std::to_string(s.count) + " elements is too large");
      }
      uint64_t b = s.count * DataTypeSize(dtype);
      total_bytes = b > UINT64_MAX - total_bytes ? UINT64_MAX : total_bytes + b;
    }
    // Big chunks for big copies; smaller ones so that a small copy still spreads over the SMs.
    uint32_t chunk_bytes = kMaxChunkBytes;
    while (chunk_bytes > kMinChunkBytes && total_bytes / chunk_bytes < 4 * uint64_t(sms_)) {
      chunk_bytes /= 2;
    }
    DeviceScope scope;
    HORA_RETURN_IF_ERROR(scope.Enter(device_));
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    size_t i = 0;
    while (i < spans.size()) {
      launch_.clear();
      uint64_t chunks = 0;
      for (; i < spans.size() && launch_.size() < kSlotSpans; ++i) {
        const CopySpan& s = spans[i];
        if (s.count == 0 || (kind == KernelKind::kCopy && s.src == s.dst)) continue;
        uint64_t count = s.count * per_elem;
        uint64_t c = PlanSpan(reinterpret_cast<uintptr_t>(s.src),
                              reinterpret_cast<uintptr_t>(s.dst), count, esize, chunk_bytes)
                         .chunks;
        if (chunks + c > kMaxChunksPerLaunch) {
          // Chunks below the largest only for copies far below kMaxChunksPerLaunch of them.
          if (launch_.empty())
            return Internal("BatchCopier::Copy: span " + std::to_string(i) + " too large");
          break;
        }
        launch_.push_back(DeviceSpan{static_cast<const unsigned char*>(s.src),
                                     static_cast<unsigned char*>(s.dst), count, chunks});
        chunks += c;
      }
      const uint32_t n = static_cast<uint32_t>(launch_.size());
      if (n == 0) break;        // only empty spans were left
      if (n <= kInlineSpans) {  // the spans travel in the launch: no table, no slot
        HORA_RETURN_IF_ERROR(CudaStatus(
            LaunchBatchKernel(kind, scale, nullptr, launch_.data(), n, chunk_bytes, chunks, st),
            "LaunchBatchKernel"));
        continue;
      }
      Slot& slot = slots_[next_];
      HORA_RETURN_IF_ERROR(WaitSlot(slot));
      std::copy(launch_.begin(), launch_.end(), slot.host);
      HORA_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(slot.dev, slot.host, n * sizeof(DeviceSpan), cudaMemcpyHostToDevice, st));
      // The table's copy is enqueued: whatever happens next, the slot is only reused after
      // an event behind it, or never.
      Status launched =
          CudaStatus(LaunchBatchKernel(kind, scale, slot.dev, nullptr, n, chunk_bytes, chunks, st),
                     "LaunchBatchKernel");
      Status recorded = CudaStatus(cudaEventRecord(slot.done, st), "cudaEventRecord");
      if (!recorded.ok()) {
        broken_ = FailedPrecondition("BatchCopier is unusable after " + recorded.ToString());
        return recorded;
      }
      slot.pending = true;
      next_ = (next_ + 1) % kSlots;
      HORA_RETURN_IF_ERROR(launched);
    }
    return Status::Ok();
  }

 private:
  struct Slot {
    DeviceSpan* host = nullptr;  // pinned
    DeviceSpan* dev = nullptr;
    cudaEvent_t done = nullptr;
    bool pending = false;  // `done` recorded after the last launch that read this slot
  };

  // Until the last kernel that read `slot` (and the copy of its table) finished.
  static Status WaitSlot(Slot& slot) {
    if (!slot.pending) return Status::Ok();
    const auto deadline = std::chrono::steady_clock::now() + kSlotWait;
    for (int polls = 0;; ++polls) {
      cudaError_t e = cudaEventQuery(slot.done);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) return CudaStatus(e, "cudaEventQuery(staging slot)");
      if (std::chrono::steady_clock::now() > deadline) {
        return DeadlineExceeded("BatchCopier: a staging slot's kernel did not finish within " +
                                std::to_string(kSlotWait.count()) + " s (is the stream blocked?)");
      }
      if (polls < 100) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    slot.pending = false;
    return Status::Ok();
  }

  const int device_;
  const int sms_;
  Status broken_;  // set when a slot could not be fenced: no Copy runs after that
  std::array<Slot, kSlots> slots_;
  size_t next_ = 0;
  std::vector<DeviceSpan> launch_;  // the spans of the launch being built
};

}  // namespace

StatusOr<std::unique_ptr<BatchCopier>> BatchCopier::Create(int device) {
  int n = 0;
  HORA_CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&n));
  if (n == 0) return Unavailable("BatchCopier::Create: no CUDA device");
  if (device < 0 || device >= n) {
    return InvalidArgument("BatchCopier::Create: CUDA device " + std::to_string(device) +
                           " is out of range [0, " + std::to_string(n) + ")");
  }
  int major = 0, minor = 0;
  HORA_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  HORA_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  if (major < 8) {
    return FailedPrecondition("BatchCopier::Create: CUDA device " + std::to_string(device) +
                              " has compute capability " + std::to_string(major) + "." +
                              std::to_string(minor) + "; the kernels are built for " +
                              BuiltArchitectures());
  }
  int sms = 0;
  HORA_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  auto copier = std::make_unique<CudaBatchCopier>(device, sms);
  HORA_RETURN_IF_ERROR(copier->Init());
  return std::unique_ptr<BatchCopier>(std::move(copier));
}

}  // namespace cuda
}  // namespace hora
