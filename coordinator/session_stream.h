// One rank's session as the coordinator's core writes to it: an outbox of the core's plain
// messages (coordinator/messages.h) and the transport that delivers them.
//
// Messages are pushed into the outbox under the service lock, which fixes their order, and
// delivered outside it by Flush(): whichever thread flushes first delivers everything queued,
// in order; a second flusher returns at once, leaving its messages to the first. So no thread
// ever reorders another's messages, and the service lock is never held across a network write.
// The transports: a gRPC stream (the adapter's sink converts and writes; a write may block on
// flow control), a host relay's stream (the sink queues on it), and rank 0's own client in
// this process (the sink is a function call).
//
// Thread safety: all methods are thread-safe. Close() must be called when the session ends;
// after it nothing is delivered.
#ifndef HORA_COORDINATOR_SESSION_STREAM_H_
#define HORA_COORDINATOR_SESSION_STREAM_H_

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>

#include "common/mutex.h"
#include "coordinator/messages.h"
#include "coordinator/planner.h"

namespace hora {

class SessionStream {
 public:
  // Delivers one message (it may take the contents); false when the session's call is over.
  using Sink = std::function<bool(CoordinatorMessage&)>;

  // A stream of its own: `cancel` ends the call (it unblocks a stuck write and the reads).
  static std::shared_ptr<SessionStream> Stream(int rank, Sink sink, std::function<void()> cancel,
                                               TimePoint now);
  // Rank 0's client in the coordinator's own process: no heartbeats, no liveness checks.
  static std::shared_ptr<SessionStream> Local(int rank, Sink sink, TimePoint now);
  // A rank behind a host relay (coordinator/host_relay.h): the relay's stream carries it, whose
  // write in progress `relay_write_started` tells. Unlike a local session it is watched.
  static std::shared_ptr<SessionStream> Relayed(int rank, Sink sink,
                                                std::function<TimePoint()> relay_write_started,
                                                TimePoint now);
  SessionStream(const SessionStream&) = delete;
  SessionStream& operator=(const SessionStream&) = delete;

  int rank() const { return rank_; }
  // In this process: no heartbeats, no liveness checks.
  bool local() const { return !cancel_ && !relay_write_started_; }

  // Records that a message arrived from the rank (lock-free; called for every message).
  void Touch(TimePoint now) { last_recv_.store(now.time_since_epoch().count()); }
  TimePoint last_recv() const { return TimePoint(Clock::duration(last_recv_.load())); }

  // Queues a message. Never blocks on the network.
  void Push(CoordinatorMessage message);
  // Delivers every queued message in order. May block on the network (flow control); returns
  // at once when another thread is already flushing or the session is closed.
  void Flush();
  // When the write in progress started; TimePoint::max() when none is.
  TimePoint write_started() const;
  // Cancels a stream's call (unblocks a stuck write and the handler's read). No-op after Close().
  void Cancel();
  // Stops all deliveries. Waits up to `grace` for one in progress, then cancels a stream's
  // call and waits for it to return.
  void Close(std::chrono::milliseconds grace);

 private:
  SessionStream(int rank, Sink sink, std::function<void()> cancel,
                std::function<TimePoint()> relay_write_started, TimePoint now);

  const int rank_;
  const Sink sink_;
  const std::function<void()> cancel_;                    // a stream's
  const std::function<TimePoint()> relay_write_started_;  // a relayed session's
  std::atomic<Clock::rep> last_recv_;

  mutable Mutex mu_;
  CondVar idle_cv_;
  std::deque<CoordinatorMessage> outbox_ GUARDED_BY(mu_);
  bool flushing_ GUARDED_BY(mu_) = false;
  bool closed_ GUARDED_BY(mu_) = false;
  bool finished_ GUARDED_BY(mu_) = false;
  TimePoint write_started_ GUARDED_BY(mu_) = TimePoint::max();
};

}  // namespace hora

#endif  // HORA_COORDINATOR_SESSION_STREAM_H_
