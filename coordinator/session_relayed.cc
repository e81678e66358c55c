// The core's side of a host relay (coordinator/host_relay.h): each rank behind a relay has a
// session like rank 0's local one, its messages handled by function calls in its own order,
// but watched: the relay forwards the rank's heartbeats, and a write to the relay that stays
// blocked counts as the rank not reading. The relay's stream itself is the gRPC adapter's
// (service_relay.cc).
#include "common/logging.h"
#include "common/mutex.h"
#include "coordinator/core.h"

namespace hora {

std::shared_ptr<SessionStream> CoordinatorCore::OpenRelayedSession(
    int rank, const WorkerMessage& hello, SessionStream::Sink sink,
    std::function<TimePoint()> write_started) {
  auto refuse = [&](Code code, const std::string& why) {
    HORA_LOG_ERROR("coordinator: refused a relayed session: {}", why);
    CoordinatorMessage abort = CoordinatorMessage::Abort(Status(code, why));
    sink(abort);
    return nullptr;
  };
  if (hello.kind != WorkerMessage::Kind::kHello || hello.rank != rank) {
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
  state.session =
      SessionStream::Relayed(rank, std::move(sink), std::move(write_started), Clock::now());
  state.session->Push(CoordinatorMessage());  // a heartbeat: the session is open
  WakeTimerLocked(Clock::now() + config_.heartbeat_timeout);
  HORA_LOG_DEBUG("coordinator: relayed session opened by {}", DescribeRank(rank));
  return state.session;
}

void CoordinatorCore::RankClosed(int rank, const std::string& why) {
  MutexLock lock(&mu_);
  if (!aborted_ && !shutting_down_) RankLostLocked(rank, why);
}

}  // namespace hora
