// Internal to coordinator/: the coordinator's core, everything rank 0 decides, without gRPC or
// protobuf. The gRPC adapter (grpc_service.h) owns it and calls it with plain messages
// (coordinator/messages.h) from the wire; rank 0's own client calls it directly
// (LocalSessionHost).
//
// Files: service.cc (start, shutdown), service_join.cc (Join, topology), store.cc (the
// rendezvous store), session.cc (sessions, ready notices, plan translation), session_local.cc
// (rank 0's session), session_relayed.cc (the sessions behind host relays), session_inline.cc
// (small allreduces reduced here), session_stream.cc (a session's outbox), service_liveness.cc (the
// timer and sender threads: cycle-time flushes, heartbeats, dead ranks, stalls, aborts),
// service_sets.cc (process sets: one planner per set, collective add and remove),
// service_autotune.cc (the autotuner: observes the emitted buckets, retunes the planners, tells the
// ranks), service_diagnose*.cc (the diagnosis).
//
// Threads: the adapter's (one per gRPC call in flight: a session's handler thread reads that
// rank's stream for the whole job and runs the planner inline on each Ready; a relay's
// messages are handled on the gRPC thread that read them), rank 0's own threads (its local
// session), the timer thread (waits on timer_cv_ until the next deadline: planner flush,
// heartbeat, liveness, stall check, start timeout) and the sender thread (flushes session
// outboxes for the timer thread and Shutdown, so that a rank that stopped reading can never
// block the timer).
#ifndef HORA_COORDINATOR_CORE_H_
#define HORA_COORDINATOR_CORE_H_

#include <algorithm>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/mutex.h"
#include "coordinator/local_session.h"
#include "coordinator/messages.h"
#include "coordinator/planner.h"
#include "coordinator/service.h"
#include "coordinator/session_stream.h"

namespace hora {

// local_rank/local_size from equal hostnames in rank order; cross_rank = index of the host
// among hosts ordered by their lowest rank. `ranks` must be indexed by rank.
Topology ComputeTopology(std::vector<RankInfo> ranks);

// "1.5 s", "120 s".
std::string FormatSeconds(std::chrono::milliseconds d);
// "2,3" (at most `cap` numbers, then ",... (N more)").
std::string JoinRanks(const std::vector<int>& ranks, size_t cap = 16);
// Names the first key of two "k=v;k=v" digests whose values differ.
std::string DescribeDigestDifference(const std::string& coordinator, const std::string& worker,
                                     int rank);

// The sessions that got messages under the service lock, to be flushed once each after it is
// released. Add is O(1): a Poll that plans for every rank adds every session, and a linear
// search per add made that O(size^2) per Poll.
class TouchedSessions {
 public:
  void Add(const std::shared_ptr<SessionStream>& session) {
    if (seen_.insert(session.get()).second) list_.push_back(session);
  }
  void clear() {
    if (list_.empty()) return;
    list_.clear();
    seen_.clear();
  }
  std::vector<std::shared_ptr<SessionStream>>::const_iterator begin() const {
    return list_.begin();
  }
  std::vector<std::shared_ptr<SessionStream>>::const_iterator end() const { return list_.end(); }

 private:
  std::vector<std::shared_ptr<SessionStream>> list_;  // in the order of their first Add
  std::unordered_set<const SessionStream*> seen_;
};

class CoordinatorCore final : public LocalSessionHost {
 public:
  explicit CoordinatorCore(const CoordinatorConfig& config);
  ~CoordinatorCore() override;

  // service.cc: starts the timer and sender threads.
  void Start();
  // Ends the job as CoordinatorService::Shutdown says, up to the point where the transport
  // must stop: drains, aborts the ranks still connected and closes the store. The adapter
  // then stops its server and calls StopThreads.
  void Drain(const std::string& reason, std::chrono::milliseconds drain);
  void StopThreads();

  size_t KnownNames();

  // service_join.cc: a rank's Join; returns the topology once every rank has joined, waiting
  // until the start deadline or `call_deadline`. `peer` is for the log.
  Status Join(const JoinRequest& request, const std::string& peer, TimePoint call_deadline,
              Topology* topology);

  // store.cc: the rendezvous store. Get waits for the key up to the timeout (or the call's
  // deadline).
  Status StoreSet(const std::string& key, const std::string& value, bool erase);
  StatusOr<std::string> StoreGet(const std::string& key, int64_t timeout_ms,
                                 TimePoint call_deadline);

  // session.cc: opens the session `hello` asks for, delivered through `sink`; `cancel` ends
  // its call. An error says why it was refused; OK with no session: the job was aborted and
  // the sink has been told.
  Status OpenSession(const WorkerMessage& hello, const std::string& peer, SessionStream::Sink sink,
                     std::function<void()> cancel, std::shared_ptr<SessionStream>* session);
  // session_relayed.cc: the session of a rank behind a host relay, or nullptr (the sink has
  // been given the Abort that says why).
  std::shared_ptr<SessionStream> OpenRelayedSession(int rank, const WorkerMessage& hello,
                                                    SessionStream::Sink sink,
                                                    std::function<TimePoint()> write_started);
  // The core's entry for every session's messages (may take `message`'s contents). The
  // sessions in `touched` got messages: the caller flushes them.
  void HandleMessage(int rank, WorkerMessage& message, TouchedSessions* touched, bool* goodbye);
  // The session's transport broke (the rank is lost unless the job is ending), or the rank said
  // goodbye.
  void EndSession(int rank, const std::shared_ptr<SessionStream>& session, bool goodbye);
  // session_relayed.cc: a relayed rank's connection is gone, for `why` (the relay said so, or
  // its stream broke).
  void RankClosed(int rank, const std::string& why);

  // session_local.cc
  Status OpenLocalSession(int rank, Sink sink) override;
  void LocalMessage(int rank, WorkerMessage message) override;

 private:
  using Touched = TouchedSessions;

  struct RankState {
    bool joined = false;
    std::string hostname;
    int64_t pid = 0;
    std::shared_ptr<SessionStream> session;  // while its handler runs
    bool had_session = false;
    bool lost = false;
    bool departed = false;  // said goodbye while the job goes on: it submits nothing more
    struct KnownSpec {
      TensorSpec spec;
      PlannerHint hint;  // where its set's planner keeps the name
    };
    std::unordered_map<uint32_t, KnownSpec> specs;               // this rank's ids
    std::unordered_map<TensorKey, uint32_t, TensorKeyHash> ids;  // (set, name) -> this rank's id
    std::unordered_map<TensorKey, std::string, TensorKeyHash> payloads;  // pending inline data
    uint64_t next_set_op = 0;  // seq of this rank's next ProcessSetOp
    uint64_t unexpected = 0;   // messages of no known kind (logged at powers of two)
    bool timings = false;      // its timeline is on: its plans carry the arrivals
  };

  // One process set: its members and its own planner (planner ranks are set ranks).
  struct SetState {
    int32_t id = 0;
    std::vector<int> ranks;     // global ranks, sorted
    std::vector<int> index_of;  // global rank -> set rank, -1 for non-members
    std::string cpu_operations;
    std::unique_ptr<Planner> planner;
  };

  // The n-th ProcessSetOp of every rank, until every rank has sent it.
  struct PendingSetOp {
    TimePoint first;
    std::vector<std::optional<ProcessSetOp>> requests;  // per rank
    int received = 0;
    bool resolved = false;
    ProcessSetResult result;
  };

  // service_join.cc
  Status ValidateJoin(const JoinRequest& request) const;
  // Waits (releasing mu_) for every rank's Join, the start deadline, the call's or the end.
  Status WaitForTopologyLocked(TimePoint call_deadline, Topology* topology) REQUIRES(mu_);
  void FailStartLocked() REQUIRES(mu_);
  std::string DescribeRank(int rank) const REQUIRES(mu_);  // "rank 3 (host h, pid 12)"

  // session.cc
  void HandleReadyLocked(int rank, WorkerMessage* ready, TimePoint now, Touched* touched)
      REQUIRES(mu_);
  // Polls every set's planner (set == nullptr) or one set's, and sends what came out; `extra`
  // (indexed by global rank, may be null) adds errors found while reading notices.
  void PollLocked(TimePoint now, SetState* set, std::vector<PlanMessage>* extra, Touched* touched)
      REQUIRES(mu_);
  void SendPlannerOutputLocked(const SetState& set, PlannerOutput out,
                               std::vector<PlanMessage>* extra, Touched* touched) REQUIRES(mu_);
  void SendExtraLocked(std::vector<PlanMessage>* extra, Touched* touched) REQUIRES(mu_);
  // After the plans of `out` went out: forgets the ranks' ids and specs of its one-shot names
  // (IsOneShotName), which no rank submits again.
  void ForgetOneShotLocked(const SetState& set, const PlannerOutput& out) REQUIRES(mu_);
  void PushPlanLocked(SessionStream& session, PlanMessage plan) REQUIRES(mu_);
  BucketPlan PlanForRankLocked(const SetState& set, const PlannedBucket& bucket, int rank,
                               const std::vector<std::string>& inline_results) const REQUIRES(mu_);

  // service_autotune.cc: feeds the buckets of `out` to the autotuner; when the settings change,
  // applies them to every planner, tells every rank and rewrites the CSV log.
  void ObserveTuningLocked(const PlannerOutput& out, TimePoint now, Touched* touched) REQUIRES(mu_);
  void SendTuningLocked(Touched* touched) REQUIRES(mu_);

  // session_inline.cc: small allreduces reduced here from the data the ranks sent inline.
  // Returns one result per entry, or nothing when some rank did not send its data.
  std::vector<std::string> InlineReduceLocked(const SetState& set,
                                              const PlannedBucket& bucket) const REQUIRES(mu_);
  // Forgets the inline data of the names that went out or failed.
  void DropPayloadsLocked(const SetState& set, const PlannerOutput& out) REQUIRES(mu_);

  // service_sets.cc
  SetState* FindSetLocked(int32_t id) REQUIRES(mu_);
  void AddSetLocked(int32_t id, std::vector<int> ranks, std::string cpu_operations) REQUIRES(mu_);
  // Why `rank` may not submit `spec` (unknown set, not a member), or OK.
  Status CheckMembershipLocked(int rank, const TensorSpec& spec, SetState** set) REQUIRES(mu_);
  void HandleSetOpLocked(int rank, const ProcessSetOp& op, Touched* touched) REQUIRES(mu_);
  ProcessSetResult ResolveSetOpLocked(uint64_t seq, const PendingSetOp& pending) REQUIRES(mu_);
  void SendSetResultLocked(int rank, const ProcessSetResult& result, Touched* touched)
      REQUIRES(mu_);
  void CheckSetOpTimeoutsLocked(TimePoint now, Touched* touched) REQUIRES(mu_);
  TimePoint NextSetDeadlineLocked() const REQUIRES(mu_);

  // service_diagnose.cc: one diagnosis round at a time (see there).
  struct DiagnosisRound {
    uint64_t id = 0;
    std::string reason;
    TimePoint deadline;
    std::vector<StallReport> stalls;
    bool every_rank = false;  // on demand: a line per rank even when something stalled
    std::vector<std::optional<DiagnosisReport>> reports;  // per rank
    std::vector<bool> awaited;  // per rank: asked, did not answer, not lost since
    bool AwaitsNobody() const {
      return std::find(awaited.begin(), awaited.end(), true) == awaited.end();
    }
    struct PendingAbort {
      Code code = Code::kAborted;
      std::string message;
      int except_rank = -1;       // as AbortLocked's
      bool with_summary = false;  // the message ends with the diagnosis, on one line
    };
    std::optional<PendingAbort> abort;  // the abort that waits for the round
  };
  // Asks every live rank for its report, unless a round is on (then the stalls join it).
  void StartDiagnosisLocked(const std::string& reason, std::vector<StallReport> stalls,
                            bool every_rank, TimePoint now) REQUIRES(mu_);
  void HandleDiagnosisLocked(int rank, DiagnosisReport report) REQUIRES(mu_);
  // A rank lost during a round will not answer: the round stops waiting for it.
  void StopAwaitingDiagnosisLocked(int rank) REQUIRES(mu_);
  // Aborts the job once a round (started here, or the one on) has the ranks' reports, at
  // most HORA_DIAGNOSE_SECONDS later; at once when the diagnosis is off. The first abort
  // asked for wins, as with AbortLocked.
  void AbortAfterDiagnosisLocked(DiagnosisRound::PendingAbort abort, const std::string& reason,
                                 std::vector<StallReport> stalls, bool every_rank, TimePoint now)
      REQUIRES(mu_);
  // Composes, logs and writes the report; then runs the abort that waited for it.
  void FinishDiagnosisLocked() REQUIRES(mu_);
  bool DiagnosisOn() const { return config_.diagnose_deadline.count() > 0; }

  // service_liveness.cc
  void TimerLoop();
  void SenderLoop();
  void TimerTickLocked(TimePoint now) REQUIRES(mu_);
  void CheckLivenessLocked(TimePoint now) REQUIRES(mu_);
  void CheckStallsLocked(TimePoint now) REQUIRES(mu_);
  // A pending tensor that a departed rank never submitted can never complete: aborts the job
  // naming the rank, the tensor and hvd.join(). Called when a rank departs and after every
  // submission once one has.
  void CheckDepartedLocked(TimePoint now) REQUIRES(mu_);
  std::vector<StallReport> StalledLocked(TimePoint now, std::chrono::milliseconds older_than) const
      REQUIRES(mu_);
  TimePoint NextWakeLocked() const REQUIRES(mu_);
  void WakeTimerLocked(TimePoint at) REQUIRES(mu_);
  void SendHeartbeatsLocked() REQUIRES(mu_);
  void RankLostLocked(int rank, const std::string& why) REQUIRES(mu_);
  // Aborts the job: every session but `except_rank` receives Abort(code, message).
  void AbortLocked(Code code, const std::string& message, int except_rank) REQUIRES(mu_);
  void ScheduleFlushLocked(const std::shared_ptr<SessionStream>& session) REQUIRES(mu_);
  // No session open and none still expected (every joined rank had one, or was lost).
  bool DrainedLocked() const REQUIRES(mu_);

  // Constant after construction.
  const CoordinatorConfig config_;
  const TimePoint start_time_;
  const TimePoint start_deadline_;
  const std::chrono::milliseconds stall_check_interval_;

  // Set by Start().
  std::thread timer_thread_;
  std::thread sender_thread_;

  Mutex mu_;
  CondVar join_cv_;                                   // topology ready, start failed, shutting down
  CondVar timer_cv_;                                  // the timer thread waits here
  CondVar sessions_cv_;                               // a session ended
  CondVar sender_cv_;                                 // work for the sender thread, or it went idle
  std::map<int32_t, SetState> sets_ GUARDED_BY(mu_);  // 0 = every rank
  int32_t next_set_id_ GUARDED_BY(mu_) = 1;           // ids are never reused within a job
  std::map<uint64_t, PendingSetOp> set_ops_ GUARDED_BY(mu_);
  std::unique_ptr<Autotuner> tuner_ GUARDED_BY(mu_);  // set when config_.autotune.enabled
  std::vector<RankState> ranks_ GUARDED_BY(mu_);
  int joined_count_ GUARDED_BY(mu_) = 0;
  int departed_count_ GUARDED_BY(mu_) = 0;  // ranks with RankState::departed
  bool topology_ready_ GUARDED_BY(mu_) = false;
  Topology topology_ GUARDED_BY(mu_);
  TimePoint topology_time_ GUARDED_BY(mu_);
  std::string start_failure_ GUARDED_BY(mu_);  // non-empty once the start timed out
  bool aborted_ GUARDED_BY(mu_) = false;
  std::string abort_message_ GUARDED_BY(mu_);
  Code abort_code_ GUARDED_BY(mu_) = Code::kAborted;
  bool shutting_down_ GUARDED_BY(mu_) = false;
  bool stop_threads_ GUARDED_BY(mu_) = false;
  TimePoint timer_wake_ GUARDED_BY(mu_) = TimePoint::max();
  TimePoint next_heartbeat_ GUARDED_BY(mu_);
  TimePoint next_stall_check_ GUARDED_BY(mu_);
  TimePoint next_stall_log_ GUARDED_BY(mu_);  // stall warnings at most every stall_warning / 2
  std::vector<std::shared_ptr<SessionStream>> flush_queue_
      GUARDED_BY(mu_);  // for the sender thread
  bool sender_busy_ GUARDED_BY(mu_) = false;
  std::optional<DiagnosisRound> diagnosis_ GUARDED_BY(mu_);
  uint64_t next_diagnosis_id_ GUARDED_BY(mu_) = 1;
  std::unordered_set<std::string> diagnosed_stalls_ GUARDED_BY(mu_);  // warned and diagnosed

  Mutex store_mu_;
  CondVar store_cv_;
  std::map<std::string, std::string> store_ GUARDED_BY(store_mu_);
  bool store_closed_ GUARDED_BY(store_mu_) = false;
};

}  // namespace hora

#endif  // HORA_COORDINATOR_CORE_H_
