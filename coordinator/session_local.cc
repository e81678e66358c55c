// Local sessions: rank 0's client in the coordinator's own process (local_session.h). The
// same state and message handling as a stream session, with function calls for transport.
#include <algorithm>

#include "common/logging.h"
#include "common/mutex.h"
#include "coordinator/core.h"

namespace hora {

Status CoordinatorCore::OpenLocalSession(int rank, Sink sink) {
  if (rank < 0 || rank >= config_.size) {
    return InvalidArgument("local session for rank " + std::to_string(rank) + ", out of range");
  }
  MutexLock lock(&mu_);
  if (aborted_) {  // tell the rank why, as a stream session would
    CoordinatorMessage abort = CoordinatorMessage::Abort(Status(abort_code_, abort_message_));
    lock.Unlock();
    sink(abort);
    return Status::Ok();
  }
  if (shutting_down_) return Unavailable("the coordinator is shutting down");
  RankState& state = ranks_[rank];
  if (!state.joined)
    return FailedPrecondition("rank " + std::to_string(rank) + " opened a session before Join");
  if (state.had_session) {
    return Status(Code::kAlreadyExists, DescribeRank(rank) + " already had a session");
  }
  state.had_session = true;
  state.session = SessionStream::Local(
      rank,
      [sink](CoordinatorMessage& m) {
        sink(m);
        return true;
      },
      Clock::now());
  HORA_LOG_DEBUG("coordinator: local session opened by {}", DescribeRank(rank));
  return Status::Ok();
}

void CoordinatorCore::LocalMessage(int rank, WorkerMessage message) {
  std::shared_ptr<SessionStream> session;
  {
    MutexLock lock(&mu_);
    if (rank < 0 || rank >= config_.size) return;
    session = ranks_[rank].session;
  }
  if (!session || !session->local()) return;
  // What a gRPC adapter checks as it converts, checked here.
  if (message.kind == WorkerMessage::Kind::kReady) {
    auto bad = std::stable_partition(
        message.ready.begin(), message.ready.end(),
        [](const ReadyNotice& n) { return !n.spec || CheckTensorSpec(*n.spec).ok(); });
    for (auto it = bad; it != message.ready.end(); ++it) {
      message.refused.push_back(
          TensorErrorNotice{static_cast<int32_t>(it->id), CheckTensorSpec(*it->spec)});
    }
    message.ready.erase(bad, message.ready.end());
  }
  session->Touch(Clock::now());
  bool goodbye = false;
  Touched touched;
  HandleMessage(rank, message, &touched, &goodbye);
  for (const auto& s : touched) s->Flush();
  if (goodbye) EndSession(rank, session, true);
}

}  // namespace hora
