// Fusion buffers in device memory, for buckets on a device communicator: the device twin of
// FusionPool (runtime/bucket_executor.h). Buffers grow to the largest bucket and then stay;
// at most kMaxBuffers exist; Acquire waits for a lease to come back when all are out (the
// completion thread returns them once the bucket's Work is done), at most `max_wait` (a
// backstop: each lease out belongs to a bucket whose Work ends within the communicator's own
// timeout, so the wait ends long before unless a device stopped making progress).
//
// Thread safety: Acquire from the executor thread; leases may be dropped on any thread. Every
// lease must be back before the pool is destroyed (ProcessSetRuntime::Stop waits for that).
#ifndef HORA_RUNTIME_DEVICE_FUSION_POOL_H_
#define HORA_RUNTIME_DEVICE_FUSION_POOL_H_

#include <chrono>
#include <memory>
#include <vector>

#include "collectives/device.h"
#include "common/mutex.h"
#include "common/status.h"

namespace hora {

class DeviceFusionPool {
 public:
  static constexpr size_t kMaxBuffers = 4;
  struct Buffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  using Lease = std::shared_ptr<Buffer>;

  static constexpr std::chrono::seconds kMaxWait{300};
  explicit DeviceFusionPool(DeviceOps* ops, std::chrono::milliseconds max_wait = kMaxWait)
      : ops_(ops), max_wait_(max_wait) {}
  ~DeviceFusionPool();
  DeviceFusionPool(const DeviceFusionPool&) = delete;
  DeviceFusionPool& operator=(const DeviceFusionPool&) = delete;

  // A buffer of at least `bytes`; DEADLINE_EXCEEDED when every buffer stayed out max_wait.
  StatusOr<Lease> Acquire(size_t bytes);

 private:
  void Return(Buffer* buffer) EXCLUDES(mu_);

  DeviceOps* const ops_;  // not owned
  const std::chrono::milliseconds max_wait_;
  Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<Buffer>> free_ GUARDED_BY(mu_);
  size_t created_ GUARDED_BY(mu_) = 0;
};

}  // namespace hora

#endif  // HORA_RUNTIME_DEVICE_FUSION_POOL_H_
