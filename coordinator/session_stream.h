// One rank's session stream as the coordinator writes to it. It queues the core's plain
// messages (coordinator/messages.h); a gRPC stream converts each to the wire's as it writes it,
// outside the service lock, and the other kinds hand it to their sink as it is.
//
// The sync gRPC API allows one Read and one Write in flight per stream. The session's own
// handler thread does all the reads; writes come from any thread (the reader of another rank
// that completed a bucket, the service's sender thread with heartbeats and aborts). Messages
// are pushed into an outbox under the service lock, which fixes their order, and written
// outside it by Flush(): whichever thread flushes first writes everything queued, in order;
// a second flusher returns at once, leaving its messages to the first. So no thread ever
// reorders another's messages, and the service lock is never held across a network write.
//
// Thread safety: all methods are thread-safe. Close() must be called by the handler thread
// before it returns; after it no write touches the stream.
#ifndef HORA_COORDINATOR_SESSION_STREAM_H_
#define HORA_COORDINATOR_SESSION_STREAM_H_

#include <grpcpp/server_context.h>
#include <grpcpp/support/sync_stream.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>

#include "common/mutex.h"
#include "coordinator/messages.h"
#include "coordinator/planner.h"
#include "proto/coordinator.pb.h"

namespace hora {

using SessionServerStream =
    grpc::ServerReaderWriter<proto::CoordinatorMessage, proto::WorkerMessage>;
using RelayServerStream = grpc::ServerReaderWriter<proto::RelayDown, proto::RelayUp>;

class SessionStream {
 public:
  // A gRPC stream: a message goes out in as many as keep each under `wire_limit` bytes.
  SessionStream(int rank, grpc::ServerContext* ctx, SessionServerStream* stream, size_t wire_limit,
                TimePoint now);
  // A local session (rank 0's client in the coordinator's own process): Flush hands each
  // message to `sink` instead of writing it to a stream (the sink may take its contents:
  // nothing reads it after). Local sessions have no heartbeats.
  using Sink = std::function<void(CoordinatorMessage&)>;
  SessionStream(int rank, Sink sink, TimePoint now);
  // A relayed session (a rank behind a host relay, coordinator/host_relay.h): `sink` queues
  // each message for the relay's stream, whose write in progress `relay_write_started` tells.
  // Unlike a local session its heartbeats are watched.
  SessionStream(int rank, Sink sink, std::function<TimePoint()> relay_write_started, TimePoint now);
  // In this process: no heartbeats, no liveness checks.
  bool local() const { return static_cast<bool>(sink_) && !relay_write_started_; }
  SessionStream(const SessionStream&) = delete;
  SessionStream& operator=(const SessionStream&) = delete;

  int rank() const { return rank_; }

  // Records that a message arrived from the rank (lock-free; called for every message).
  void Touch(TimePoint now) { last_recv_.store(now.time_since_epoch().count()); }
  TimePoint last_recv() const { return TimePoint(Clock::duration(last_recv_.load())); }

  // Queues a message. Never blocks on the network.
  void Push(CoordinatorMessage message);
  // Writes every queued message in order. May block on the network (flow control); returns
  // at once when another thread is already flushing or the stream is closed.
  void Flush();
  // When the write in progress started; TimePoint::max() when none is.
  TimePoint write_started() const;
  // Cancels the call (unblocks a stuck write and the handler's read). No-op after Close().
  void Cancel();
  // Stops all writes. Waits up to `grace` for a write in progress, then cancels the call and
  // waits for it to return.
  void Close(std::chrono::milliseconds grace);

 private:
  const int rank_;
  grpc::ServerContext* const ctx_;
  SessionServerStream* const stream_;
  const size_t wire_limit_ = 0;
  const Sink sink_;
  const std::function<TimePoint()> relay_write_started_;
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
