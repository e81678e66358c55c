// Fusion buffers in device memory, for buckets on a device communicator: the device twin of
// FusionPool (runtime/bucket_executor.h). Buffers grow to the largest bucket and then stay;
// at most kMaxBuffers exist; Acquire waits for a lease to come back when all are out (the
// completion thread returns them once the bucket's Work is done).
//
// Thread safety: Acquire from the executor thread; leases may be dropped on any thread. Every
// lease must be back before the pool is destroyed (ProcessSetRuntime::Stop waits for that).
#ifndef HORA_RUNTIME_DEVICE_FUSION_POOL_H_
#define HORA_RUNTIME_DEVICE_FUSION_POOL_H_

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

  explicit DeviceFusionPool(DeviceOps* ops) : ops_(ops) {}
  ~DeviceFusionPool();
  DeviceFusionPool(const DeviceFusionPool&) = delete;
  DeviceFusionPool& operator=(const DeviceFusionPool&) = delete;

  StatusOr<Lease> Acquire(size_t bytes);

 private:
  void Return(Buffer* buffer) EXCLUDES(mu_);

  DeviceOps* const ops_;  // not owned
  Mutex mu_;
  CondVar cv_;
  std::vector<std::unique_ptr<Buffer>> free_ GUARDED_BY(mu_);
  size_t created_ GUARDED_BY(mu_) = 0;
};

}  // namespace hora

#endif  // HORA_RUNTIME_DEVICE_FUSION_POOL_H_
