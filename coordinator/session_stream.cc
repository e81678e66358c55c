#include "coordinator/session_stream.h"

#include <memory>
#include <utility>

#include "common/mutex.h"

namespace hora {

std::shared_ptr<SessionStream> SessionStream::Stream(int rank, Sink sink,
                                                     std::function<void()> cancel, TimePoint now) {
  return std::shared_ptr<SessionStream>(
      new SessionStream(rank, std::move(sink), std::move(cancel), nullptr, now));
}

std::shared_ptr<SessionStream> SessionStream::Local(int rank, Sink sink, TimePoint now) {
  return std::shared_ptr<SessionStream>(
      new SessionStream(rank, std::move(sink), nullptr, nullptr, now));
}

std::shared_ptr<SessionStream> SessionStream::Relayed(
    int rank, Sink sink, std::function<TimePoint()> relay_write_started, TimePoint now) {
  return std::shared_ptr<SessionStream>(
      new SessionStream(rank, std::move(sink), nullptr, std::move(relay_write_started), now));
}

SessionStream::SessionStream(int rank, Sink sink, std::function<void()> cancel,
                             std::function<TimePoint()> relay_write_started, TimePoint now)
    : rank_(rank),
      sink_(std::move(sink)),
      cancel_(std::move(cancel)),
      relay_write_started_(std::move(relay_write_started)),
      last_recv_(now.time_since_epoch().count()) {}

void SessionStream::Push(CoordinatorMessage message) {
  MutexLock lock(&mu_);
  if (!closed_) outbox_.push_back(std::move(message));
}

void SessionStream::Flush() {
  MutexLock lock(&mu_);
  if (flushing_) return;  // the thread that is flushing delivers our messages too
  flushing_ = true;
  while (!closed_ && !outbox_.empty()) {
    CoordinatorMessage message = std::move(outbox_.front());
    outbox_.pop_front();
    write_started_ = Clock::now();
    lock.Unlock();
    const bool ok = sink_(message);
    lock.Lock();
    write_started_ = TimePoint::max();
    if (!ok) {  // the call is over; the handler's read sees it too
      outbox_.clear();
      break;
    }
  }
  flushing_ = false;
  idle_cv_.NotifyAll();
}

TimePoint SessionStream::write_started() const {
  if (relay_write_started_) return relay_write_started_();
  MutexLock lock(&mu_);
  return write_started_;
}

void SessionStream::Cancel() {
  MutexLock lock(&mu_);
  if (!finished_ && cancel_) cancel_();
}

void SessionStream::Close(std::chrono::milliseconds grace) {
  MutexLock lock(&mu_);
  closed_ = true;
  outbox_.clear();
  if (!idle_cv_.WaitFor(&mu_, grace, [this] {
        mu_.AssertHeld();
        return !flushing_;
      })) {
    if (cancel_) cancel_();  // a write is stuck: cancelling the call makes it return
    idle_cv_.Wait(&mu_, [this] {
      mu_.AssertHeld();
      return !flushing_;
    });
  }
  finished_ = true;
}

}  // namespace hora
