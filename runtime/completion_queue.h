// The completion thread: finishes the buckets of asynchronous communicators.
//
// An executor that ran a bucket on an asynchronous communicator (collectives/communicator.h,
// "Completion") hands the bucket's Work and a finishing function here and moves on to its
// next bucket. This thread polls every outstanding Work (for 200 us without sleeping, where a
// small bucket's Work usually ends, then sleeping in growing steps up to 1 ms, so that a job
// waiting on long kernels burns no core) and, once a Work is done,
// runs its function with the Work's status on this thread: it unpacks and completes the
// bucket's handles. Functions run one at a time, in the order their Works finish.
//
// Every Work ends within its communicator's timeout, or at once when the communicator is
// aborted, so Stop() is bounded: it waits for the outstanding Works, then joins.
// Thread safety: Add and Stop may be called from any thread.
#ifndef HORA_RUNTIME_COMPLETION_QUEUE_H_
#define HORA_RUNTIME_COMPLETION_QUEUE_H_

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/communicator.h"
#include "common/mutex.h"
#include "common/status.h"

namespace hora {

class CompletionQueue {
 public:
  using Done = std::function<void(Status work_status)>;

  CompletionQueue();
  ~CompletionQueue();  // Stop()
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  void Add(std::unique_ptr<Work> work, Done done);
  // Waits for every outstanding Work, runs its function, joins the thread. Idempotent.
  void Stop();

 private:
  struct Item {
    std::unique_ptr<Work> work;
    Done done;
  };
  void Loop();

  mutable Mutex mu_;
  CondVar cv_;
  std::vector<Item> incoming_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_COMPLETION_QUEUE_H_
