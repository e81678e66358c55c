#include "collectives/hierarchical/chunk_pipeline.h"

#include <thread>

#include "common/mutex.h"

namespace hora {
namespace {

// What the two threads tell each other: how far each got, and the helper's failure.
class Progress {
 public:
  // The calling thread: chunks [0, n) are scattered.
  void Scattered(size_t n) {
    MutexLock lock(&mu_);
    scattered_ = n;
    cv_.NotifyAll();
  }
  // The calling thread is done (finished or failed): the helper runs no further chunk.
  void Stop() {
    MutexLock lock(&mu_);
    stopped_ = true;
    cv_.NotifyAll();
  }
  // The helper: waits until `chunk` is scattered; false when told to stop first.
  bool AwaitScattered(size_t chunk) {
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [&] {
      mu_.AssertHeld();
      return stopped_ || scattered_ > chunk;
    });
    return scattered_ > chunk && !stopped_;
  }
  // The helper: `chunk` is reduced across hosts, or failed with `s`.
  void Crossed(size_t chunk, const Status& s) {
    MutexLock lock(&mu_);
    if (s.ok()) {
      crossed_ = chunk + 1;
    } else {
      error_ = s;
    }
    cv_.NotifyAll();
  }
  // The calling thread: waits until `chunk` is reduced across hosts; the helper's error if it
  // failed first.
  Status AwaitCrossed(size_t chunk) {
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [&] {
      mu_.AssertHeld();
      return crossed_ > chunk || !error_.ok();
    });
    return crossed_ > chunk ? Status::Ok() : error_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  size_t scattered_ GUARDED_BY(mu_) = 0;
  size_t crossed_ GUARDED_BY(mu_) = 0;
  bool stopped_ GUARDED_BY(mu_) = false;
  Status error_ GUARDED_BY(mu_);
};

}  // namespace

Status RunChunkPipeline(size_t chunks, const ChunkPhases& phases) {
  Progress progress;
  std::thread helper([&] {
    for (size_t k = 0; k < chunks; ++k) {
      if (!progress.AwaitScattered(k)) return;
      Status s = phases.cross(k);
      progress.Crossed(k, s);
      if (!s.ok()) return;
    }
  });
  Status s = phases.scatter(0);
  if (s.ok()) progress.Scattered(1);
  for (size_t k = 0; s.ok() && k < chunks; ++k) {
    if (k + 1 < chunks) {
      s = phases.scatter(k + 1);
      if (!s.ok()) break;
      progress.Scattered(k + 2);
    }
    s = progress.AwaitCrossed(k);
    if (s.ok()) s = phases.gather(k);
  }
  progress.Stop();
  helper.join();
  return s;
}

}  // namespace hora
