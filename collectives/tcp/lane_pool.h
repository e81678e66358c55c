// Threads that run a collective's channels side by side (transfer.h): a large transfer's
// kernel copies (send and recv are copies on the calling core) and reductions then run on
// as many cores as there are channels, as the streams of tools/bench/tcp_limit.py do.
//
// The pool owns its threads: started in the constructor, stopped by a flag under the lock
// and a condition variable, joined in the destructor. Idle threads sleep on the condition
// variable. Run from one thread at a time.
#ifndef HORA_COLLECTIVES_TCP_LANE_POOL_H_
#define HORA_COLLECTIVES_TCP_LANE_POOL_H_

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "common/status.h"

namespace hora {

class LanePool {
 public:
  explicit LanePool(int threads);
  ~LanePool();
  LanePool(const LanePool&) = delete;
  LanePool& operator=(const LanePool&) = delete;

  int threads() const { return static_cast<int>(threads_.size()); }

  // Runs jobs[0] on the calling thread and jobs[1..] on the pool's threads (at most
  // threads() + 1 jobs), returns when all have returned: the first failure in job order, or
  // OK. Each job bounds its own waits (Links' no-progress deadline); this call waits for them.
  Status RunAll(const std::vector<std::function<Status()>>& jobs);

 private:
  void Loop(int index);

  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable wake_;  // a job was posted, or stop
  std::condition_variable done_;  // a job finished
  // Guarded by mu_.
  bool stop_ = false;
  const std::function<Status()>* job_[64] = {};
  Status result_[64];
  int pending_ = 0;
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_TCP_LANE_POOL_H_
