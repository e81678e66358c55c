#include "runtime/device_fusion_pool.h"

namespace hora {

DeviceFusionPool::~DeviceFusionPool() {
  for (auto& b : free_) ops_->Free(b->ptr);
}

StatusOr<DeviceFusionPool::Lease> DeviceFusionPool::Acquire(size_t bytes) {
  MutexLock lock(&mu_);
  // Bounded: every lease out belongs to a bucket on the completion thread, whose Work ends
  // within the communicator's timeout.
  cv_.Wait(&mu_, [&] {
    mu_.AssertHeld();
    return !free_.empty() || created_ < kMaxBuffers;
  });
  std::unique_ptr<Buffer> buf;
  if (!free_.empty()) {
    buf = std::move(free_.back());
    free_.pop_back();
  } else {
    buf = std::make_unique<Buffer>();
    ++created_;
  }
  lock.Unlock();
  if (buf->bytes < bytes) {
    ops_->Free(buf->ptr);
    buf->ptr = nullptr;
    buf->bytes = 0;
    auto p = ops_->Allocate(bytes);
    if (!p.ok()) {
      Return(buf.release());
      return p.status();
    }
    buf->ptr = p.value();
    buf->bytes = bytes;
  }
  return Lease(buf.release(), [this](Buffer* b) { Return(b); });
}

void DeviceFusionPool::Return(Buffer* buffer) {
  {
    MutexLock lock(&mu_);
    free_.emplace_back(buffer);
  }
  cv_.NotifyOne();
}

}  // namespace hora
