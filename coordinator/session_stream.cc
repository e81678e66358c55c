#include "coordinator/session_stream.h"

#include <utility>

#include "common/mutex.h"
#include "coordinator/convert.h"

namespace hora {

SessionStream::SessionStream(int rank, grpc::ServerContext* ctx, SessionServerStream* stream,
                             size_t wire_limit, TimePoint now)
    : rank_(rank),
      ctx_(ctx),
      stream_(stream),
      wire_limit_(wire_limit),
      last_recv_(now.time_since_epoch().count()) {}

SessionStream::SessionStream(int rank, Sink sink, TimePoint now)
    : SessionStream(rank, std::move(sink), nullptr, now) {}

SessionStream::SessionStream(int rank, Sink sink, std::function<TimePoint()> relay_write_started,
                             TimePoint now)
    : rank_(rank),
      ctx_(nullptr),
      stream_(nullptr),
      sink_(std::move(sink)),
      relay_write_started_(std::move(relay_write_started)),
      last_recv_(now.time_since_epoch().count()) {}

void SessionStream::Push(CoordinatorMessage message) {
  MutexLock lock(&mu_);
  if (!closed_) outbox_.push_back(std::move(message));
}

void SessionStream::Flush() {
  MutexLock lock(&mu_);
  if (flushing_) return;  // the thread that is flushing writes our messages too
  flushing_ = true;
  while (!closed_ && !outbox_.empty()) {
    CoordinatorMessage message = std::move(outbox_.front());
    outbox_.pop_front();
    write_started_ = Clock::now();
    lock.Unlock();
    bool ok = true;
    if (sink_) {
      sink_(message);
    } else {
      ToProtoMessages(message, wire_limit_,
                      [&](proto::CoordinatorMessage* m) { ok = ok && stream_->Write(*m); });
    }
    lock.Lock();
    write_started_ = TimePoint::max();
    if (!ok) {  // the call is over; the handler's Read sees it too
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
  if (!finished_ && ctx_ != nullptr) ctx_->TryCancel();
}

void SessionStream::Close(std::chrono::milliseconds grace) {
  MutexLock lock(&mu_);
  closed_ = true;
  outbox_.clear();
  if (!idle_cv_.WaitFor(&mu_, grace, [this] {
        mu_.AssertHeld();
        return !flushing_;
      })) {
    if (ctx_ != nullptr)
      ctx_->TryCancel();  // a write is stuck: cancelling the call makes it return
    idle_cv_.Wait(&mu_, [this] {
      mu_.AssertHeld();
      return !flushing_;
    });
  }
  finished_ = true;
}

}  // namespace hora
