#include "runtime/device_fusion_pool.h"

#include <string>

namespace hora {

DeviceFusionPool::~DeviceFusionPool() {
  for (auto& b : free_) ops_->Free(b->ptr);
}

StatusOr<DeviceFusionPool::Lease> DeviceFusionPool::Acquire(size_t bytes) {
  MutexLock lock(&mu_);
  const bool got = cv_.WaitUntil(&mu_, std::chrono::steady_clock::now() + max_wait_, [&] {
    mu_.AssertHeld();
    return !free_.empty() || created_ < kMaxBuffers;
  });
  if (!got) {
    return DeadlineExceeded("device fusion pool: all " + std::to_string(kMaxBuffers) +
                            " fusion buffers stayed in use for " +
                            std::to_string(max_wait_.count()) +
                            " ms (the buckets holding them did not finish on the device)");
  }
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
