// The Engine: everything one process of a Hora job owns. Exactly one per process (the C API
// keeps the pointer); nothing else in Hora is global.
//
// Start() reads nothing itself: it takes validated Options, starts the coordinator service
// when this is rank 0, joins the job (blocking until every rank joined or the start timeout),
// builds the global process set's communicator through the backend registry and starts the
// threads.
//
// Threads and who does what:
//   - Enqueuing (framework) threads validate, queue, and write the ready notice to the
//     coordinator themselves (AnnounceFresh). On rank 0 that write is a function call into the
//     in-process coordinator, so an enqueuing thread of rank 0 runs the planner and may
//     deliver plans (OnPlan) to rank 0 itself before Enqueue returns.
//   - The coordinator client's reader thread delivers plans (OnPlan) on ranks other than 0;
//     OnPlan completes at once what needs no collective (tensor errors, inline-reduced small
//     allreduces) and hands the buckets to their process set's executor thread.
//   - One executor thread per process set this rank is a member of runs that set's buckets in
//     plan order (runtime/process_set.h); the completion thread finishes the buckets of
//     asynchronous communicators.
//   - The control thread (BackgroundLoop) wakes on events only: a join result, the sticky
//     error (it then fails everything pending and aborts every communicator), shutdown, and
//     held notices that are due (below).
// Notice batching (Nagle's rule for the coordinator's path): an enqueuing thread announces
// its request at once while fewer than CoordinatorClient::kUnbatchedNotices of this rank's
// notices wait for their plan (a blocking loop, a few async calls: no added latency; sends
// and recvs, answered only when their peer posts the other side, do not count); otherwise
// the request stays fresh in the queue and goes out with every other fresh one in
// one message when the answers bring the count under that, or at the latest after the
// planner's cycle time (the control thread). A burst (a backward pass of per-parameter calls,
// broadcast_parameters) then costs rank 0 a few messages per rank instead of one per tensor
// (docs/coordinator-scale.md). A join or process-set request first sends what is held.
// Errors of the job (a dead rank, a lost coordinator, a failed collective) are sticky: every
// pending and later operation fails with the first such cause.
//
// Thread safety: Enqueue*, the process-set calls, handles() and the accessors may be called
// from any thread; process-set add/remove calls are serialized (they are collective).
// Shutdown() (also run by the destructor) must not race with itself.
#ifndef HORA_RUNTIME_ENGINE_H_
#define HORA_RUNTIME_ENGINE_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common/mutex.h"
#include "common/node_cache.h"
#include "common/status.h"
#include "coordinator/client.h"
#include "coordinator/messages.h"
#include "coordinator/service.h"
#include "runtime/bootstrap/address_exchange.h"
#include "runtime/completion_queue.h"
#include "runtime/diagnose_signal.h"
#include "runtime/diagnosis_responder.h"
#include "runtime/flight_recorder.h"
#include "runtime/handle_table.h"
#include "runtime/options.h"
#include "runtime/peer_transfers.h"
#include "runtime/process_set.h"
#include "runtime/tensor_queue.h"
#include "runtime/timeline.h"

namespace hora {

struct BackendConfig;  // collectives/registry.h

// A process set as the C API reports it.
struct ProcessSetInfo {
  int32_t id = 0;
  std::vector<int> ranks;
  int rank = -1;  // this process's rank in the set, -1 if not a member
  std::string cpu_backend;
};

class Engine : private ProcessSetRuntime::Host {
 public:
  static StatusOr<std::unique_ptr<Engine>> Start(const Options& options);
  ~Engine() override;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request (process set and membership, shape, dtype, op, root or peer,
  // splits, buffers) and queues it; returns the handle. The calling thread writes the ready
  // notice itself (see above), so it never waits for other ranks, but it can wait for a slow
  // stream. `output` is ignored by an allgather, reducescatter or alltoall unless output_bytes
  // is its result's size (Request::output_bytes): the runtime then holds the result;
  // send reads `input`, recv writes `output`.
  StatusOr<int64_t> Enqueue(TensorSpec spec, const void* input, void* output,
                            void* stream = nullptr, size_t output_bytes = 0);
  StatusOr<int64_t> EnqueueBarrier(int32_t process_set);
  StatusOr<int64_t> EnqueueJoin(int32_t process_set);
  // Point-to-point within a process set: the n-th send to `peer` with `tag` matches the
  // peer's n-th recv from this rank with `tag`. spec carries the tensor (and process_set).
  StatusOr<int64_t> EnqueueSend(TensorSpec spec, const void* input, int peer, int tag);
  StatusOr<int64_t> EnqueueRecv(TensorSpec spec, void* output, int peer, int tag);

  // Collective over every rank of the job, in the same order everywhere. Blocks until every
  // rank made the call (bounded by the start timeout) and, for members, until the set's
  // communicator is built. ranks: global ranks (any order, no duplicates). cpu_operations:
  // a backend name or "auto" for this set's CPU tensors, "" = HORA_CPU_OPERATIONS.
  StatusOr<int32_t> AddProcessSet(std::vector<int> ranks, const std::string& cpu_operations);
  // Collective, like AddProcessSet. Operations pending in the set fail with ABORTED.
  Status RemoveProcessSet(int32_t id);
  // NOT_FOUND for an id that is not (or no longer) a set.
  StatusOr<ProcessSetInfo> ProcessSet(int32_t id) const;
  std::vector<int32_t> ProcessSetIds() const;

  // Wait and release through Wait and Release below: handles().Release leaves an operation's
  // steady-path record (about 100 bytes) behind until the engine goes.
  HandleTable& handles() { return handles_; }
  // handles().Wait, except that a thread waiting for an operation on the steady path helps
  // run it (SteadyPath::Help) before it blocks on the handle.
  Status Wait(int64_t handle, std::chrono::duration<double> timeout);
  // handles().Poll, except that a poller of an operation on the steady path runs the log's
  // small instances when nobody else is (a thread spinning on poll could otherwise keep the
  // set's thread from running them, with more ranks than cores).
  Status Poll(int64_t handle, bool* done);
  // handles().Release, forgetting the handle's steady-path record too.
  Status Release(int64_t handle);
  const Options& options() const { return options_; }
  const RankInfo& self() const { return topology_.ranks[options_.rank]; }

  // OK while healthy, else the sticky error.
  Status AsyncError() const;

  // The timeline (runtime/timeline.h). StartTimeline writes this rank's events to
  // TimelineRankPath(path, rank) with timestamps on the coordinator's clock (it measures the
  // offset first: a few round trips to the coordinator). Every rank is meant to call it (each
  // writes its own file); it does not wait for the others. FAILED_PRECONDITION when already
  // on. HORA_TIMELINE starts it at init. StopTimeline finishes the file; OK when off.
  Status StartTimeline(const std::string& path, bool mark_cycles);
  Status StopTimeline();
  const Timeline& timeline() const { return timeline_; }

  // The steady path's counters of a process set this rank is a member of (all zero when the
  // set has no steady path); NOT_FOUND for an unknown set.
  StatusOr<SteadyStats> Steady(int32_t process_set) const;
  // What this rank has told the coordinator (CoordinatorClient::sent).
  ControlCounters ControlSent() const { return client_->sent(); }
  // The names this rank keeps an id for (one-shot names are forgotten once planned:
  // IsOneShotName), and on rank 0 the same summed over every rank at its coordinator (0
  // elsewhere).
  struct KnownNames {
    size_t rank = 0;
    size_t coordinator = 0;
  };
  KnownNames Known() const;

  // The fusion threshold and cycle time the coordinator plans with, as it last announced them
  // (HORA_AUTOTUNE changes them during the first steps, the same on every rank); before any
  // announcement, and without autotuning, the configured values with done = !autotune.
  TuningNotice Tuning() const;

  // This rank cannot make the operation `spec` names (process set and name): tells the
  // coordinator, so that the operation fails on every rank of the set with `why` instead of
  // leaving the others waiting. `why` is returned (with this rank's number in it).
  Status Refuse(TensorSpec spec, const Status& why);

  // The flight recorder (runtime/flight_recorder.h) and the diagnosis (docs/failure-model.md
  // "Diagnosis"). DiagnoseNow asks the coordinator for a diagnosis of every rank (what
  // HORA_DIAGNOSE_SIGNAL does); the report goes to rank 0's log and the diagnosis file.
  const FlightRecorder& recorder() const { return recorder_; }
  DiagnosisResponder& diagnosis() { return *responder_; }
  void DiagnoseNow(const std::string& why) { client_->SendDiagnoseAsk(why); }

  // Stops the threads; pending operations fail with ABORTED. Idempotent.
  Status Shutdown();

 private:
  explicit Engine(const Options& options);
  Status Init();
  void BackgroundLoop();
  // Announces the fresh requests now, or holds them (notice batching, above).
  void Announce();
  // Sends every fresh request's notice in one message (now).
  void AnnounceFresh();
  // `plan` answered some of this rank's notices: held ones may go now.
  void Answered(const PlanMessage& plan);
  StatusOr<int64_t> EnqueueTransfer(TensorSpec spec, const void* input, void* output, int peer,
                                    int tag, bool send);
  // Runs on the thread that delivers plans (see above).
  void OnPlan(PlanMessage plan);
  void OnProcessSetResult(ProcessSetResult result);
  void CompleteInline(const BucketPlan& bucket, int set_size);
  // Hands a bucket's specs (this rank's) to the set's steady path, before it runs.
  void LearnSteady(SteadyPath* steady, const BucketPlan& bucket);
  void SetError(Status status);
  void FailEverything(const Status& status);
  // What a pending operation fails with at Shutdown.
  static Status ShutDownStatus();
  // The name, the collective and the process set: errors here are this rank's alone. On
  // success *set (if given) is the spec's process set.
  Status ValidateIdentity(const TensorSpec& spec,
                          std::shared_ptr<ProcessSetRuntime>* set = nullptr) const;
  // Everything else (dtype, op, device, shape, buffers, root, peer, splits), for a spec that
  // passed ValidateIdentity: an error here is announced as a refusal, so the operation fails
  // on every rank of the set (Refuse).
  Status ValidateSpec(const TensorSpec& spec, const ProcessSetRuntime& set, const void* input,
                      const void* output) const;
  // Enqueue once ValidateIdentity passed: the other checks (a refusal on failure), the queue,
  // the announcement.
  StatusOr<int64_t> EnqueueIn(const std::shared_ptr<ProcessSetRuntime>& set, TensorSpec spec,
                              const void* input, void* output, void* stream,
                              size_t output_bytes = 0);
  std::shared_ptr<ProcessSetRuntime> FindSet(int32_t id) const;
  // Starts rank 0's coordinator (rank 0) and learns the address every rank connects to.
  StatusOr<std::string> StartCoordinator();
  // Sends the n-th process-set operation and waits for the coordinator's answer.
  StatusOr<ProcessSetResult> RunSetOp(ProcessSetOp op, const std::string& refused)
      REQUIRES(set_op_mu_);
  // Builds (members) and registers the set's runtime.
  Status InstallSet(int32_t id, std::vector<int> ranks, const std::string& cpu_operations);
  BackendConfig BackendConfigFor(int32_t id, const std::vector<int>& ranks, int set_rank) const;
  // The job's point-to-point channel (size > 1) and the transfers over it; before the
  // global set is built, so that every rank has published its address once any can send.
  Status OpenPeerTransfers(const std::vector<int>& everyone);
  // The set's steady board and communicator (runtime/steady_path.h): a shared-memory board
  // where the set's communicator `comm` offers one, else a board over a mailbox (members on
  // any hosts); none when HORA_STEADY leaves the steady path off.
  StatusOr<SteadyPath::Parts> SteadyParts(int32_t id, const std::vector<int>& ranks, int set_rank,
                                          Communicator* comm) const;

  // ProcessSetRuntime::Host
  std::optional<Request> TakeRequest(int32_t id) override;
  void Complete(int64_t handle, Status status, OpResult result) override;
  void Complete(int64_t handle, Status status) override {
    handles_.Complete(handle, std::move(status));
  }
  Status JobError() override {
    return halted_.load(std::memory_order_acquire) ? AsyncError() : Status::Ok();
  }
  Status BucketFailed(const Status& status) override;
  Status FailJob(const Status& status) override;
  // The set's communicator for CUDA tensors, chosen by HORA_GPU_OPERATIONS.
  StatusOr<std::unique_ptr<Communicator>> CreateDeviceCommunicator(int32_t set,
                                                                   const std::vector<int>& ranks,
                                                                   int set_rank, Device device,
                                                                   int index, int ordinal) override;
  void GiveBack(Request request, bool announce) override;
  bool Queued(const TensorSpec& spec) override;

  // Constant after Init.
  const Options options_;
  Topology topology_;
  std::string coordinator_host_;
  std::unique_ptr<CoordinatorService> service_;  // rank 0 only
  std::unique_ptr<AddressExchange> exchange_;    // open for the job's life when one was used
  std::unique_ptr<CoordinatorClient> client_;
  std::unique_ptr<CompletionQueue> completion_;
  std::unique_ptr<PeerTransfers> peers_;  // send and recv

  FlightRecorder recorder_;  // before handles_, which records every end in it
  HandleTable handles_;
  TensorQueue queue_;
  std::unique_ptr<DiagnosisResponder> responder_;  // set by Init before the session starts
  std::unique_ptr<DiagnoseSignal> signal_;
  Timeline timeline_;  // hooks check timeline_.on() (one load) before recording

  // Process sets: the runtimes are shared with the threads that deliver plans.
  mutable Mutex sets_mu_;
  std::map<int32_t, std::shared_ptr<ProcessSetRuntime>> sets_ GUARDED_BY(sets_mu_);
  Mutex set_op_mu_;  // serializes AddProcessSet / RemoveProcessSet on this rank
  uint64_t next_set_op_ GUARDED_BY(set_op_mu_) = 0;

  mutable Mutex mu_;
  CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::deque<std::pair<int32_t, int>> join_done_ GUARDED_BY(mu_);     // (set, last rank)
  TuningNotice tuning_ GUARDED_BY(mu_);                               // the coordinator's last word
  std::map<uint64_t, ProcessSetResult> set_results_ GUARDED_BY(mu_);  // by seq
  Status error_ GUARDED_BY(mu_);                                      // the sticky error
  std::atomic<bool> halted_{false};  // set under mu_ with stop_ or error_: EnqueueIn's check
  bool error_handled_ GUARDED_BY(mu_) = false;                // pending ops failed with error_
  std::map<int32_t, int64_t> barrier_count_ GUARDED_BY(mu_);  // per set
  std::map<int32_t, int64_t> join_handles_ GUARDED_BY(mu_);   // per set, the pending join
  // Notice batching: fresh requests are held until hold_deadline_ (or announce_now_).
  bool hold_armed_ GUARDED_BY(mu_) = false;
  bool announce_now_ GUARDED_BY(mu_) = false;
  std::chrono::steady_clock::time_point hold_deadline_ GUARDED_BY(mu_);
  std::atomic<bool> holding_{false};  // hold_armed_, read without mu_
  std::atomic<int> unanswered_{0};    // this rank's notices no plan has answered yet

  // Tensor ids. New requests are announced by the enqueuing thread itself (no wake-up of
  // another thread on the latency path); plan delivery maps ids back to keys.
  mutable Mutex announce_mu_;
  std::unordered_map<TensorKey, uint32_t, TensorKeyHash> ids_ GUARDED_BY(announce_mu_);
  std::unordered_map<uint32_t, TensorSpec> id_specs_ GUARDED_BY(announce_mu_);  // last announced
  std::unordered_map<uint32_t, TensorKey> id_keys_ GUARDED_BY(announce_mu_);
  uint32_t next_id_ GUARDED_BY(announce_mu_) = 0;

  // Handles of requests that took a steady path, for Wait and Poll: their set and instance
  // (until Release).
  Mutex steady_mu_;
  using SteadyWaits =
      std::unordered_map<int64_t,
                         std::pair<std::shared_ptr<ProcessSetRuntime>, SteadyPath::Ticket>>;
  SteadyWaits steady_waits_ GUARDED_BY(steady_mu_);
  NodeCache<SteadyWaits> steady_waits_spare_ GUARDED_BY(steady_mu_);

  std::thread thread_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_ENGINE_H_
