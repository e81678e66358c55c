// The timer and sender threads: cycle-time flushes, heartbeats, dead ranks, stalls, aborts.
//
// The timer thread sleeps on timer_cv_ until the earliest of: the planner's next deadline,
// the next heartbeat, the earliest time a session could pass heartbeat_timeout, the next stall
// check and the start deadline. Whoever makes one of those earlier calls WakeTimerLocked.
// It never writes to a stream itself: it queues messages in outboxes and hands the sessions
// to the sender thread, so a rank that stopped reading cannot stop liveness checks.
#include <algorithm>

#include "common/logging.h"
#include "common/mutex.h"
#include "coordinator/core.h"

namespace hora {
namespace {

std::string DescribeStalls(const std::vector<StallReport>& stalls, size_t cap) {
  std::string s;
  for (size_t i = 0; i < stalls.size() && i < cap; ++i) {
    const StallReport& r = stalls[i];
    if (i > 0) s += "; ";
    s += "tensor " + r.name + " submitted by " + (r.ready_ranks.size() == 1 ? "rank " : "ranks ") +
         JoinRanks(r.ready_ranks, 8) + " but not by " +
         (r.missing_ranks.size() == 1 ? "rank " : "ranks ") + JoinRanks(r.missing_ranks, 8) +
         " for " + FormatSeconds(std::chrono::duration_cast<std::chrono::milliseconds>(r.age));
  }
  if (stalls.size() > cap) s += "; and " + std::to_string(stalls.size() - cap) + " more";
  return s;
}

}  // namespace

void CoordinatorCore::TimerLoop() {
  MutexLock lock(&mu_);
  while (!stop_threads_) {
    const TimePoint now = Clock::now();
    TimerTickLocked(now);
    // Never spin, even if a deadline stays in the past.
    timer_wake_ = std::max(NextWakeLocked(), now + std::chrono::microseconds(100));
    timer_cv_.WaitUntil(&mu_, timer_wake_);
  }
}

void CoordinatorCore::WakeTimerLocked(TimePoint at) {
  if (at < timer_wake_) {
    timer_wake_ = at;
    timer_cv_.NotifyOne();
  }
}

TimePoint CoordinatorCore::NextWakeLocked() const {
  TimePoint wake = std::min({next_heartbeat_, next_stall_check_, NextSetDeadlineLocked()});
  if (diagnosis_) wake = std::min(wake, diagnosis_->deadline);
  if (!topology_ready_ && start_failure_.empty()) wake = std::min(wake, start_deadline_);
  if (topology_ready_) {
    for (const RankState& r : ranks_) {
      if (r.joined && !r.had_session) {
        wake = std::min(wake, topology_time_ + config_.start_timeout);
      }
      if (r.session && !r.lost && !r.session->local()) {
        wake = std::min(wake, r.session->last_recv() + config_.heartbeat_timeout);
      }
    }
  }
  return wake;
}

void CoordinatorCore::TimerTickLocked(TimePoint now) {
  if (!topology_ready_ && start_failure_.empty() && now >= start_deadline_) FailStartLocked();
  if (!aborted_ && NextSetDeadlineLocked() <= now) {
    Touched touched;
    PollLocked(now, nullptr, nullptr, &touched);
    CheckSetOpTimeoutsLocked(now, &touched);
    for (const auto& s : touched) ScheduleFlushLocked(s);
  }
  if (now >= next_heartbeat_) {
    SendHeartbeatsLocked();
    next_heartbeat_ = now + config_.heartbeat_interval;
  }
  if (diagnosis_ && now >= diagnosis_->deadline) FinishDiagnosisLocked();
  if (!aborted_) CheckLivenessLocked(now);
  if (!aborted_ && now >= next_stall_check_) {
    CheckStallsLocked(now);
    next_stall_check_ = now + stall_check_interval_;
  }
}

void CoordinatorCore::SendHeartbeatsLocked() {
  for (const RankState& r : ranks_) {
    if (!r.session || r.lost) continue;
    r.session->Push(CoordinatorMessage());  // a heartbeat
    ScheduleFlushLocked(r.session);
  }
}

void CoordinatorCore::CheckLivenessLocked(TimePoint now) {
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  for (int i = 0; i < config_.size && !aborted_; ++i) {
    const RankState& r = ranks_[i];
    if (r.lost) continue;
    if (topology_ready_ && r.joined && !r.had_session &&
        now >= topology_time_ + config_.start_timeout) {
      RankLostLocked(i, "it did not open its session within " +
                            FormatSeconds(config_.start_timeout) + " after all ranks joined");
      continue;
    }
    if (!r.session || r.session->local()) continue;  // a local session lives as long as we do
    const auto silent = now - r.session->last_recv();
    if (silent >= config_.heartbeat_timeout) {
      RankLostLocked(i,
                     "missed heartbeats for " + FormatSeconds(duration_cast<milliseconds>(silent)));
      continue;
    }
    const TimePoint write_started = r.session->write_started();
    if (write_started != TimePoint::max() && now - write_started >= config_.heartbeat_timeout) {
      RankLostLocked(i, "it stopped reading from the coordinator for " +
                            FormatSeconds(duration_cast<milliseconds>(now - write_started)));
    }
  }
}

// Every set's stalled names, with global ranks and the set in the name.
std::vector<StallReport> CoordinatorCore::StalledLocked(
    TimePoint now, std::chrono::milliseconds older_than) const {
  std::vector<StallReport> all;
  for (const auto& [id, set] : sets_) {
    for (StallReport r : set.planner->Stalled(now, older_than)) {
      for (int& rank : r.ready_ranks) rank = set.ranks[rank];
      for (int& rank : r.missing_ranks) rank = set.ranks[rank];
      r.name = DescribeTensor(TensorKey{id, r.name});
      all.push_back(std::move(r));
    }
  }
  return all;
}

void CoordinatorCore::CheckStallsLocked(TimePoint now) {
  std::vector<StallReport> stalls = StalledLocked(now, config_.stall_warning);
  if (!stalls.empty() && now >= next_stall_log_) {
    next_stall_log_ = now + config_.stall_warning / 2;
    HORA_LOG_WARN("coordinator: {} tensor(s) stalled: {}", stalls.size(),
                  DescribeStalls(stalls, 10));
    bool fresh = false;  // a stall not diagnosed before: diagnose it once
    for (const StallReport& r : stalls) fresh = diagnosed_stalls_.insert(r.name).second || fresh;
    if (fresh) StartDiagnosisLocked("stall warning", stalls, false, now);
  }
  if (config_.stall_timeout <= std::chrono::milliseconds(0)) return;
  std::vector<StallReport> timed_out = StalledLocked(now, config_.stall_timeout);
  if (timed_out.empty()) return;
  if (diagnosis_ && diagnosis_->abort) return;  // the abort waits for the round
  std::string message = "stall timeout: " + DescribeStalls(timed_out, 10);
  AbortAfterDiagnosisLocked({Code::kAborted, std::move(message), -1, true}, "stall timeout",
                            timed_out, false, now);
  if (diagnosis_) diagnosis_->stalls = std::move(timed_out);  // a round on already: these
}

void CoordinatorCore::CheckDepartedLocked(TimePoint now) {
  if (departed_count_ == 0 || aborted_ || shutting_down_) return;
  // An abort already waits for its diagnosis round: a rank that failed and then shut down
  // must not replace the failure it reported with "it has shut down".
  if (diagnosis_ && diagnosis_->abort) return;
  for (const StallReport& r : StalledLocked(now, std::chrono::milliseconds(0))) {
    for (int missing : r.missing_ranks) {
      if (!ranks_[missing].departed) continue;
      AbortLocked(Code::kAborted,
                  DescribeRank(missing) + " has shut down, so it will never submit what the " +
                      "others wait for: " + DescribeStalls({r}, 1) +
                      ". A rank that runs fewer steps than the others (uneven data) must call " +
                      "hvd.join() before it stops, which lets the others go on without it",
                  -1);
      return;
    }
  }
}

void CoordinatorCore::RankLostLocked(int rank, const std::string& why) {
  RankState& state = ranks_[rank];
  if (state.lost) return;
  state.lost = true;
  StopAwaitingDiagnosisLocked(rank);  // e.g. the ranks behind a lost host relay
  const std::string message = DescribeRank(rank) + " is lost: " + why;
  // The survivors' reports first (each answers within milliseconds unless its Python is
  // wedged): once they have the abort, they exit, and the launcher stops rank 0 with them.
  AbortAfterDiagnosisLocked({Code::kPeerFailure, message, rank, false}, message,
                            StalledLocked(Clock::now(), {}), true, Clock::now());
  if (state.session) state.session->Cancel();  // nothing may stay blocked writing to it
}

void CoordinatorCore::AbortLocked(Code code, const std::string& message, int except_rank) {
  if (aborted_) return;
  aborted_ = true;
  abort_message_ = message;
  abort_code_ = code;
  HORA_LOG_ERROR("coordinator: aborting the job: {}", message);
  join_cv_.NotifyAll();
  for (int i = 0; i < config_.size; ++i) {
    const RankState& r = ranks_[i];
    if (i == except_rank || !r.session) continue;
    r.session->Push(CoordinatorMessage::Abort(Status(code, message)));
    ScheduleFlushLocked(r.session);
  }
}

void CoordinatorCore::ScheduleFlushLocked(const std::shared_ptr<SessionStream>& s) {
  if (std::find(flush_queue_.begin(), flush_queue_.end(), s) == flush_queue_.end()) {
    flush_queue_.push_back(s);
  }
  sender_cv_.NotifyAll();
}

void CoordinatorCore::SenderLoop() {
  MutexLock lock(&mu_);
  while (true) {
    sender_cv_.Wait(&mu_, [this] {
      mu_.AssertHeld();
      return stop_threads_ || !flush_queue_.empty();
    });
    if (flush_queue_.empty()) break;  // stop_threads_ and nothing left
    std::vector<std::shared_ptr<SessionStream>> batch;
    batch.swap(flush_queue_);
    sender_busy_ = true;
    lock.Unlock();
    for (const auto& s : batch) s->Flush();
    batch.clear();
    lock.Lock();
    sender_busy_ = false;
    sender_cv_.NotifyAll();
  }
}

}  // namespace hora
