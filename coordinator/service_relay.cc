// The coordinator's end of a host relay (host_relay.h): one stream carries the sessions of
// a host's ranks.
//
// Each relayed rank gets a session like rank 0's local one: its messages are handled by
// function calls, in its own order, and what the coordinator sends it goes to a sink. The
// sink queues the message for this stream's writer thread, which sends everything queued as
// one RelayDown: a plan that completes on a host's 8 ranks costs one write, not 8. Unlike a
// local session a relayed one is watched: the relay forwards the rank's heartbeats, and a
// write to the relay that stays blocked counts as the rank not reading.
#include <algorithm>
#include <thread>

#include "common/logging.h"
#include "common/mutex.h"
#include "coordinator/auth.h"
#include "coordinator/service_impl.h"

namespace hora {
namespace {

// The writer thread of one relay stream. Push never blocks on the network.
class RelayWriter {
 public:
  RelayWriter(grpc::ServerContext* ctx, RelayServerStream* stream)
      : ctx_(ctx), stream_(stream), thread_([this] { Loop(); }) {}
  RelayWriter(const RelayWriter&) = delete;
  RelayWriter& operator=(const RelayWriter&) = delete;

  // Takes *message's contents (no copy of a plan).
  void Push(int rank, proto::CoordinatorMessage* message) {
    MutexLock lock(&mu_);
    if (stopping_ || broken_) return;
    proto::RelayDown::Entry* entry = pending_.add_entries();
    entry->set_rank(rank);
    entry->mutable_message()->Swap(message);
    cv_.NotifyOne();
  }

  TimePoint write_started() const {
    MutexLock lock(&mu_);
    return write_started_;
  }

  // Writes what is queued, then stops; a write still blocked after `grace` is cancelled.
  void Stop(std::chrono::milliseconds grace) {
    {
      MutexLock lock(&mu_);
      stopping_ = true;
      cv_.NotifyOne();
      if (!cv_.WaitFor(&mu_, grace, [this] {
            mu_.AssertHeld();
            return done_;
          })) {
        ctx_->TryCancel();
      }
    }
    thread_.join();
  }

 private:
  void Loop() {
    MutexLock lock(&mu_);
    for (;;) {
      cv_.Wait(&mu_, [this] {
        mu_.AssertHeld();
        return stopping_ || pending_.entries_size() > 0;
      });
      if (pending_.entries_size() == 0 || broken_) break;  // stopping, nothing left
      proto::RelayDown batch;
      batch.Swap(&pending_);
      write_started_ = Clock::now();
      lock.Unlock();
      const bool ok = stream_->Write(batch);
      lock.Lock();
      write_started_ = TimePoint::max();
      if (!ok) broken_ = true;  // the call is over; the handler's Read sees it too
    }
    done_ = true;
    cv_.NotifyAll();
  }

  grpc::ServerContext* const ctx_;
  RelayServerStream* const stream_;
  mutable Mutex mu_;
  CondVar cv_;
  proto::RelayDown pending_ GUARDED_BY(mu_);
  TimePoint write_started_ GUARDED_BY(mu_) = TimePoint::max();
  bool stopping_ GUARDED_BY(mu_) = false;
  bool broken_ GUARDED_BY(mu_) = false;
  bool done_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: starts after the members above exist
};

}  // namespace

grpc::Status CoordinatorServiceImpl::Relay(grpc::ServerContext* ctx, RelayServerStream* stream) {
  grpc::Status auth = CheckToken(*ctx, config_.token, "Relay");
  if (!auth.ok()) return auth;
  RelayWriter writer(ctx, stream);
  std::unordered_map<int, std::shared_ptr<SessionStream>> sessions;  // open on this relay
  int relay_rank = -1;
  proto::RelayUp up;
  Touched touched;
  while (stream->Read(&up)) {
    if (relay_rank < 0) relay_rank = up.relay_rank();
    for (const proto::RelayUp::Entry& entry : up.entries()) {
      const int rank = entry.rank();
      auto it = sessions.find(rank);
      if (it == sessions.end()) {
        std::shared_ptr<SessionStream> opened = OpenRelayedSession(
            rank, entry.message(),
            [&writer, rank](proto::CoordinatorMessage& m) { writer.Push(rank, &m); },
            [&writer] { return writer.write_started(); });
        if (opened) {
          opened->Flush();  // the first heartbeat: tells the rank its session is open
          sessions.emplace(rank, std::move(opened));
        }
        continue;
      }
      const std::shared_ptr<SessionStream> session = it->second;
      if (!entry.closed().empty()) {
        {
          MutexLock lock(&mu_);
          if (!aborted_ && !shutting_down_) RankLostLocked(rank, entry.closed());
        }
        EndSession(rank, session, false);
        sessions.erase(it);
        continue;
      }
      session->Touch(Clock::now());
      bool goodbye = false;
      HandleMessage(rank, entry.message(), &touched, &goodbye);
      for (const auto& s : touched) s->Flush();
      touched.clear();
      if (goodbye) {
        EndSession(rank, session, true);
        sessions.erase(it);
      }
    }
  }
  // The stream is over: the relay's process is gone (or shutting down), and with it the way
  // to every rank still open on it. Its own rank is named first: that is the cause.
  std::vector<std::pair<int, std::shared_ptr<SessionStream>>> left(sessions.begin(),
                                                                   sessions.end());
  std::stable_partition(left.begin(), left.end(),
                        [relay_rank](const auto& p) { return p.first == relay_rank; });
  for (const auto& [rank, session] : left) {
    {
      MutexLock lock(&mu_);
      if (!aborted_ && !shutting_down_) {
        RankLostLocked(rank, rank == relay_rank
                                 ? std::string("its connection to the coordinator broke (it "
                                               "relayed its host's ranks)")
                                 : "its host relay, rank " + std::to_string(relay_rank) +
                                       ", broke its connection to the coordinator");
      }
    }
    EndSession(rank, session, false);
  }
  writer.Stop(std::chrono::seconds(1));
  return grpc::Status::OK;
}

std::shared_ptr<SessionStream> CoordinatorServiceImpl::OpenRelayedSession(
    int rank, const proto::WorkerMessage& hello, SessionStream::Sink sink,
    std::function<TimePoint()> write_started) {
  auto refuse = [&](Code code, const std::string& why) {
    HORA_LOG_ERROR("coordinator: refused a relayed session: {}", why);
    proto::CoordinatorMessage abort;
    abort.mutable_abort()->set_code(static_cast<int32_t>(code));
    abort.mutable_abort()->set_message(why);
    sink(abort);
    return nullptr;
  };
  if (!hello.has_hello() || hello.hello().rank() != rank) {
    return refuse(Code::kInvalidArgument, "a relayed session for rank " + std::to_string(rank) +
                                              " must start with its Hello");
  }
  if (rank < 0 || rank >= config_.size) {
    return refuse(Code::kInvalidArgument, "Hello from rank " + std::to_string(rank) +
                                              ", out of range [0, " + std::to_string(config_.size) +
                                              ")");
  }
  MutexLock lock(&mu_);
  if (aborted_) {
    const Code code = abort_code_;
    const std::string message = abort_message_;
    lock.Unlock();
    return refuse(code, message);
  }
  if (shutting_down_) {
    lock.Unlock();
    return refuse(Code::kUnavailable, "the coordinator is shutting down");
  }
  RankState& state = ranks_[rank];
  if (!state.joined || state.had_session) {
    const std::string why = state.joined
                                ? DescribeRank(rank) + " already had a session"
                                : "rank " + std::to_string(rank) + " opened a session before Join";
    lock.Unlock();
    return refuse(Code::kFailedPrecondition, why);
  }
  state.had_session = true;
  state.session = std::make_shared<SessionStream>(rank, std::move(sink), std::move(write_started),
                                                  Clock::now());
  proto::CoordinatorMessage first;
  first.mutable_heartbeat();
  state.session->Push(std::move(first));
  WakeTimerLocked(Clock::now() + config_.heartbeat_timeout);
  HORA_LOG_DEBUG("coordinator: relayed session opened by {}", DescribeRank(rank));
  return state.session;
}

}  // namespace hora
