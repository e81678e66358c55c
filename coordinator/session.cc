// Session streams: Hello, then Ready / JoinOp / Heartbeat / Failure / Goodbye from the worker.
//
// Latency path: the handler thread that reads a Ready runs Planner::Submit and Poll inline
// under mu_, translates every bucket into each rank's view (its own tensor ids), pushes one
// Plan message per rank into that rank's outbox (under mu_, which fixes the global order), and
// then, outside mu_, flushes those outboxes itself. No thread hand-off on the way. The gRPC
// adapter (grpc_service.cc) converts at the edge; what it hands the core, and what the core
// queues, are the plain messages of coordinator/messages.h.
#include <algorithm>

#include "common/logging.h"
#include "common/mutex.h"
#include "coordinator/core.h"

namespace hora {

Status CoordinatorCore::OpenSession(const WorkerMessage& hello, const std::string& peer,
                                    SessionStream::Sink sink, std::function<void()> cancel,
                                    std::shared_ptr<SessionStream>* session) {
  if (hello.kind != WorkerMessage::Kind::kHello) {
    return InvalidArgument("a session must start with Hello");
  }
  const int rank = hello.rank;
  if (rank < 0 || rank >= config_.size) {
    return InvalidArgument("Hello from rank " + std::to_string(rank) + ", out of range [0, " +
                           std::to_string(config_.size) + ")");
  }
  MutexLock lock(&mu_);
  if (aborted_) {  // tell the rank why, as it would have heard with a session
    CoordinatorMessage abort = CoordinatorMessage::Abort(Status(abort_code_, abort_message_));
    lock.Unlock();
    sink(abort);
    return Status::Ok();
  }
  if (shutting_down_) return Unavailable("the coordinator is shutting down");
  RankState& state = ranks_[rank];
  if (!state.joined) {
    return FailedPrecondition("rank " + std::to_string(rank) + " opened a session before Join");
  }
  if (state.had_session) {
    return Status(Code::kAlreadyExists, DescribeRank(rank) + " already had a session");
  }
  state.had_session = true;
  state.session = SessionStream::Stream(rank, std::move(sink), std::move(cancel), Clock::now());
  *session = state.session;
  state.session->Push(CoordinatorMessage());  // a heartbeat: the session is open
  WakeTimerLocked(Clock::now() + config_.heartbeat_timeout);
  HORA_LOG_DEBUG("coordinator: session opened by {} from {}", DescribeRank(rank), peer);
  return Status::Ok();
}

void CoordinatorCore::HandleMessage(int rank, WorkerMessage& message, Touched* touched,
                                    bool* goodbye) {
  using Kind = WorkerMessage::Kind;
  switch (message.kind) {
    case Kind::kHeartbeat:
      return;
    case Kind::kReady: {
      MutexLock lock(&mu_);
      if (!aborted_) HandleReadyLocked(rank, &message, Clock::now(), touched);
      CheckDepartedLocked(Clock::now());
      return;
    }
    case Kind::kJoinOp: {
      MutexLock lock(&mu_);
      if (aborted_) return;
      const TimePoint now = Clock::now();
      SetState* set = FindSetLocked(message.process_set);
      if (set == nullptr || set->index_of[rank] < 0) {
        HORA_LOG_WARN("coordinator: rank {} joined process set {}, which it is not a member of",
                      rank, message.process_set);
        return;
      }
      set->planner->Join(set->index_of[rank], now);
      PollLocked(now, set, nullptr, touched);
      return;
    }
    case Kind::kProcessSetOp: {
      MutexLock lock(&mu_);
      if (aborted_) return;
      if (!message.malformed.ok()) {
        ProcessSetResult r;
        r.seq = message.set_op.seq;
        r.status = message.malformed;
        SendSetResultLocked(rank, r, touched);
        return;
      }
      HandleSetOpLocked(rank, message.set_op, touched);
      return;
    }
    case Kind::kGoodbye:
      *goodbye = true;
      return;
    case Kind::kFailure: {
      MutexLock lock(&mu_);
      const std::string why = DescribeRank(rank) + " failed: " + message.text;
      AbortAfterDiagnosisLocked({Code::kPeerFailure, why, rank, false}, why,
                                StalledLocked(Clock::now(), {}), true, Clock::now());
      return;
    }
    case Kind::kTimings: {
      MutexLock lock(&mu_);
      ranks_[rank].timings = message.timings;
      return;
    }
    case Kind::kDiagnoseAsk: {
      MutexLock lock(&mu_);
      if (shutting_down_) return;
      const TimePoint now = Clock::now();
      // Operations waited for a second or more: younger ones are negotiations in progress.
      StartDiagnosisLocked(
          "asked by " + DescribeRank(rank) +
              (message.text.empty() ? std::string() : ": " + message.text.substr(0, 200)),
          StalledLocked(now, std::chrono::seconds(1)), true, now);
      for (const auto& r : ranks_) {
        if (r.session) touched->Add(r.session);
      }
      return;
    }
    case Kind::kDiagnosis: {
      MutexLock lock(&mu_);
      if (!message.malformed.ok()) {
        HORA_LOG_WARN("coordinator: {} sent a malformed diagnosis report: {}", DescribeRank(rank),
                      message.malformed.message());
        return;
      }
      HandleDiagnosisLocked(rank, std::move(message.diagnosis));
      return;
    }
    case Kind::kHello:
    case Kind::kUnknown: {
      // A broken or hostile client can send these as fast as it can write: log the 1st, 2nd,
      // 4th, 8th, ... so that the coordinator's log stays small (a fuzz run wrote 2,600 a second).
      MutexLock lock(&mu_);
      const uint64_t n = ++ranks_[rank].unexpected;
      if ((n & (n - 1)) == 0) {
        HORA_LOG_WARN(
            "coordinator: ignored an unexpected message (kind {}) from rank {} ({} so "
            "far; logged at powers of two)",
            message.kind == Kind::kHello ? 1 : message.unknown_kind, rank, n);
      }
      return;
    }
  }
}

void CoordinatorCore::HandleReadyLocked(int rank, WorkerMessage* ready, TimePoint now,
                                        Touched* touched) {
  RankState& state = ranks_[rank];
  std::vector<PlanMessage> extra;  // errors found here, for this rank
  auto fail = [&](uint32_t id, Status status) {
    if (extra.empty()) extra.resize(config_.size);
    extra[rank].errors.push_back(TensorErrorNotice{static_cast<int32_t>(id), std::move(status)});
  };
  for (TensorErrorNotice& refused : ready->refused) fail(refused.id, std::move(refused.status));
  std::vector<SetState*> polled;
  auto submit = [&](uint32_t id, RankState::KnownSpec& known, ReadyNotice& notice) {
    mu_.AssertHeld();  // the lambdas here run inside HandleReadyLocked
    const TensorSpec& spec = known.spec;
    SetState* set = nullptr;
    Status member = CheckMembershipLocked(rank, spec, &set);
    if (!member.ok()) {
      fail(id, member);
      if (IsOneShotName(spec.name)) {  // failed here, never planned: forgotten now
        state.ids.erase(TensorKeyOf(spec));
        state.specs.erase(id);  // `spec` refers into it: last
      }
      return;
    }
    if (notice.payload) state.payloads[TensorKeyOf(spec)] = std::move(*notice.payload);
    set->planner->Submit(set->index_of[rank], spec, now, static_cast<int32_t>(id), &known.hint);
    if (std::find(polled.begin(), polled.end(), set) == polled.end()) polled.push_back(set);
  };
  for (ReadyNotice& notice : ready->ready) {
    if (notice.spec) {
      state.ids[TensorKeyOf(*notice.spec)] = notice.id;
      auto it =
          state.specs.insert_or_assign(notice.id, RankState::KnownSpec{std::move(*notice.spec), {}})
              .first;
      submit(notice.id, it->second, notice);
      continue;
    }
    auto it = state.specs.find(notice.id);
    if (it == state.specs.end()) {
      fail(notice.id,
           InvalidArgument("unknown tensor id " + std::to_string(notice.id) + " from rank " +
                           std::to_string(rank) + " (its first use must carry the signature)"));
      continue;
    }
    submit(notice.id, it->second, notice);
  }
  for (SetState* set : polled) PollLocked(now, set, extra.empty() ? nullptr : &extra, touched);
  if (!extra.empty()) SendExtraLocked(&extra, touched);
}

BucketPlan CoordinatorCore::PlanForRankLocked(
    const SetState& set, const PlannedBucket& bucket, int rank,
    const std::vector<std::string>& inline_results) const {
  BucketPlan plan;
  plan.seq = bucket.seq;
  plan.process_set = set.id;
  plan.participants.assign(bucket.participants.begin(), bucket.participants.end());
  plan.collective = bucket.collective;
  plan.dtype = bucket.dtype;
  plan.op = bucket.op;
  plan.device = bucket.device;
  plan.root = bucket.root;
  plan.prescale = bucket.prescale;
  plan.postscale = bucket.postscale;
  plan.joined_ranks = bucket.joined_ranks;
  plan.inline_reduced = !inline_results.empty();
  plan.entries.reserve(bucket.entries.size());
  const int me = set.index_of[rank];
  // The arrivals are three integers per entry that only a timeline reads (45 % of the plans'
  // bytes at 1,024 ranks, docs/coordinator-scale.md): sent to ranks whose timeline is on.
  const bool timings = ranks_[rank].timings;
  for (const PlannedBucket::Entry& e : bucket.entries) {
    BucketPlan::Entry entry;
    const bool submitted = me < static_cast<int>(e.submitted.size()) && e.submitted[me];
    if (submitted) {
      entry.id = me < static_cast<int>(e.tags.size()) ? e.tags[me] : -1;
      if (entry.id < 0)
        HORA_LOG_ERROR("coordinator: no id of rank {} for tensor '{}'", rank, e.name);
    }
    entry.num_elements = e.num_elements;
    entry.layout = e.layout;
    entry.first_dims = e.first_dims;
    if (!e.splits.empty()) {
      entry.recv_splits.reserve(e.splits.size());
      for (const auto& from_sender : e.splits) {
        entry.recv_splits.push_back(me < static_cast<int>(from_sender.size()) ? from_sender[me]
                                                                              : 0);
      }
    }
    if (plan.inline_reduced) entry.inline_result = inline_results[plan.entries.size()];
    if (timings && e.last_rank >= 0 && e.last_rank < static_cast<int>(e.arrival_us.size()) &&
        e.last_rank < static_cast<int>(set.ranks.size())) {
      entry.last_rank = set.ranks[e.last_rank];
      const int64_t last = e.arrival_us[e.last_rank];
      entry.lag_us = last;
      if (submitted && me < static_cast<int>(e.arrival_us.size()) && e.arrival_us[me] >= 0) {
        entry.wait_us = last - e.arrival_us[me];
      }
    }
    plan.entries.push_back(std::move(entry));
  }
  return plan;
}

void CoordinatorCore::PollLocked(TimePoint now, SetState* only, std::vector<PlanMessage>* extra,
                                 Touched* touched) {
  auto poll = [&](SetState& set) {
    mu_.AssertHeld();
    PlannerOutput out = set.planner->Poll(now);
    if (tuner_ != nullptr) ObserveTuningLocked(out, now, touched);
    SendPlannerOutputLocked(set, std::move(out), extra, touched);
  };
  if (only != nullptr) {
    poll(*only);
  } else {
    for (auto& [id, set] : sets_) poll(set);
  }
  WakeTimerLocked(NextSetDeadlineLocked());
}

// One Plan message per member that has something: the buckets (send/recv only to their two
// ranks), the failures of names it submitted, and the errors in `extra` for it (which are
// consumed). join_done goes to every member.
void CoordinatorCore::SendPlannerOutputLocked(const SetState& set, PlannerOutput out,
                                              std::vector<PlanMessage>* extra, Touched* touched) {
  const bool any = !out.buckets.empty() || !out.failures.empty() || out.join_done;
  if (!any) return;
  std::vector<std::vector<std::string>> inline_results(out.buckets.size());
  for (size_t b = 0; b < out.buckets.size(); ++b) {
    inline_results[b] = InlineReduceLocked(set, out.buckets[b]);
    // A bucket whose results would not fit one message runs on the data plane instead (every
    // rank still holds its input); the same decision for every rank, from the same sizes.
    size_t bytes = 0;
    for (const std::string& r : inline_results[b]) bytes += r.size();
    if (bytes > static_cast<size_t>(config_.max_message_bytes) / 4) inline_results[b].clear();
  }
  DropPayloadsLocked(set, out);
  for (size_t i = 0; i < set.ranks.size(); ++i) {
    const int r = set.ranks[i];
    const int me = static_cast<int>(i);
    const std::shared_ptr<SessionStream>& session = ranks_[r].session;
    if (!session) continue;
    PlanMessage plan;
    for (size_t b = 0; b < out.buckets.size(); ++b) {
      const auto& p = out.buckets[b].participants;
      if (!p.empty() && std::find(p.begin(), p.end(), me) == p.end()) continue;
      plan.buckets.push_back(PlanForRankLocked(set, out.buckets[b], r, inline_results[b]));
    }
    for (const TensorFailure& f : out.failures) {
      if (me >= static_cast<int>(f.submitted.size()) || !f.submitted[me]) continue;
      auto it = ranks_[r].ids.find(TensorKey{set.id, f.name});
      const int32_t id = it == ranks_[r].ids.end() ? -1 : static_cast<int32_t>(it->second);
      plan.errors.push_back(TensorErrorNotice{id, f.status});
    }
    if (extra != nullptr && !(*extra)[r].errors.empty()) {
      for (TensorErrorNotice& e : (*extra)[r].errors) plan.errors.push_back(std::move(e));
      (*extra)[r].errors.clear();
    }
    bool pushed = false;
    if (!plan.buckets.empty() || !plan.errors.empty()) {
      PushPlanLocked(*session, std::move(plan));
      pushed = true;
    }
    if (out.join_done) {
      CoordinatorMessage message;
      message.kind = CoordinatorMessage::Kind::kJoinDone;
      message.last_joined_rank = set.ranks[out.last_joined_rank];
      message.process_set = set.id;
      session->Push(std::move(message));
      pushed = true;
    }
    if (pushed) touched->Add(session);
  }
  ForgetOneShotLocked(set, out);
}

void CoordinatorCore::ForgetOneShotLocked(const SetState& set, const PlannerOutput& out) {
  auto forget = [&](const std::string& name) {
    mu_.AssertHeld();
    if (!IsOneShotName(name)) return;
    const TensorKey key{set.id, name};
    for (int r : set.ranks) {
      RankState& state = ranks_[r];
      auto it = state.ids.find(key);
      if (it == state.ids.end()) continue;
      state.specs.erase(it->second);
      state.ids.erase(it);
    }
  };
  for (const PlannedBucket& b : out.buckets) {
    for (const PlannedBucket::Entry& e : b.entries) forget(e.name);
  }
  for (const TensorFailure& f : out.failures) forget(f.name);
}

size_t CoordinatorCore::KnownNames() {
  MutexLock lock(&mu_);
  size_t known = 0;
  for (const RankState& state : ranks_) known += state.ids.size();
  return known;
}

// The session's adapter splits a plan that would pass the wire's message limit
// (ToProtoMessages).
void CoordinatorCore::PushPlanLocked(SessionStream& session, PlanMessage plan) {
  CoordinatorMessage message;
  message.kind = CoordinatorMessage::Kind::kPlan;
  message.plan = std::move(plan);
  session.Push(std::move(message));
}

void CoordinatorCore::SendExtraLocked(std::vector<PlanMessage>* extra, Touched* touched) {
  for (int r = 0; r < config_.size; ++r) {
    if ((*extra)[r].errors.empty() || !ranks_[r].session) continue;
    PushPlanLocked(*ranks_[r].session, std::move((*extra)[r]));
    (*extra)[r].errors.clear();
    touched->Add(ranks_[r].session);
  }
}

void CoordinatorCore::EndSession(int rank, const std::shared_ptr<SessionStream>& session,
                                 bool goodbye) {
  {
    MutexLock lock(&mu_);
    RankState& state = ranks_[rank];
    if (!goodbye && !state.lost && !aborted_ && !shutting_down_) {
      RankLostLocked(rank, "its connection to the coordinator broke");
    }
    if (goodbye) HORA_LOG_DEBUG("coordinator: {} said goodbye", DescribeRank(rank));
    if (goodbye && !state.departed && !aborted_ && !shutting_down_) {
      state.departed = true;
      ++departed_count_;
      CheckDepartedLocked(Clock::now());
    }
    if (state.session == session) state.session.reset();
    sessions_cv_.NotifyAll();
  }
  session->Close(std::chrono::seconds(1));
}

}  // namespace hora
