// Device memory and streams, device-neutral: what the runtime needs to run buckets of device
// tensors without naming a backend or including a device's headers.
//
// Two pieces:
//   - DeviceRuntime, one per device kind (registered by the backend that brings it, e.g.
//     collectives/nccl for Device::kCuda): whether the process can use such a device at all
//     (Probe), events recorded on a framework's stream at enqueue time (so that the bucket's
//     stream later waits for exactly the work queued before the enqueue), and plain copies
//     (results to the framework's memory).
//   - DeviceOps, which a device communicator exposes (Communicator::device_ops()): device
//     buffers (fusion buffers, results) and work enqueued on the communicator's own stream,
//     in order with its collectives, so that packing, the collective and unpacking need no
//     host synchronization; the communicator's Fence() covers all of it.
//
// Thread safety: DeviceRuntime is thread-safe. DeviceOps follows its communicator (one
// thread), except Free, which may be called from any thread (a finished bucket's buffers are
// returned on the completion thread).
#ifndef HORA_COLLECTIVES_DEVICE_H_
#define HORA_COLLECTIVES_DEVICE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace hora {

// A point in a device stream's work; done once everything queued before it has run.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
};

struct DeviceCopySpan {
  const void* src = nullptr;
  void* dst = nullptr;
  size_t count = 0;  // elements
};

class DeviceRuntime {
 public:
  virtual ~DeviceRuntime() = default;
  // OK when this process can run work on device `index`; else why not, naming what the
  // device's runtime answered ("cudaGetDeviceCount: no CUDA-capable device is detected").
  virtual Status Probe(int index) const = 0;
  // One line for horarun --check-build: the runtime's version and the devices, or the error.
  virtual std::string Describe() const = 0;
  // Records an event on `stream` (the framework's stream of device `index`; null = the
  // device's default stream).
  virtual StatusOr<std::shared_ptr<DeviceEvent>> RecordEvent(int index, void* stream) const = 0;
  // Copy of `bytes` between any two of host and device memory (a result into the framework's
  // tensor), queued on `stream` (the framework's stream the request was made on; null = the
  // device's default stream) after the work queued there before (which may still use dst's
  // memory: the framework's allocator reuses it in stream order), and finished when this
  // returns (so that the source may be freed at once, from any stream).
  virtual Status Copy(int index, void* dst, const void* src, size_t bytes, void* stream) const = 0;
  // Device memory of device `index` (results the runtime holds until their handle is
  // released, which may be after the communicator is gone). Free: any thread.
  virtual StatusOr<void*> Allocate(int index, size_t bytes) const = 0;
  virtual void Free(int index, void* ptr) const = 0;
};

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual StatusOr<void*> Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr) = 0;
  // Enqueued on the communicator's stream: later work of the stream waits for `event`.
  virtual Status WaitEvent(const DeviceEvent& event) = 0;
  // Enqueued: dst[i] = src[i] * scale for every span (scale 1.0: a copy of any dtype).
  virtual Status ScaleCopy(const std::vector<DeviceCopySpan>& spans, DataType dtype,
                           double scale) = 0;
  // Enqueued: `bytes` zero bytes at dst.
  virtual Status Zero(void* dst, size_t bytes) = 0;
};

// Called once per device kind during static initialization (the runtime is not owned and
// lives for the process). Returns true (for a static initializer).
bool RegisterDeviceRuntime(Device device, const DeviceRuntime* runtime);
// The registered runtime, or null when this build has none for `device`.
const DeviceRuntime* DeviceRuntimeFor(Device device);

}  // namespace hora

#endif  // HORA_COLLECTIVES_DEVICE_H_
