// The Engine: everything one process of a Hora job owns. Exactly one per process (the C API
// keeps the pointer); nothing else in Hora is global.
//
// Start() reads nothing itself: it takes validated Options, starts the coordinator service
// when this is rank 0, joins the job (blocking until every rank joined or the start timeout),
// bootstraps the data plane through the coordinator's store and starts the background thread.
//
// Enqueuing threads announce their requests to the coordinator themselves. Plans arrive on
// the coordinator client's reader thread, which completes at once what needs no collective
// (errors, inline-reduced small allreduces) and hands data-plane buckets to the background
// thread. That thread wakes on events only (a plan, a join result, an error, shutdown) and runs
// the buckets in plan order, completing their handles. Errors of the job (a dead rank, a lost
// coordinator, a failed collective) are sticky: every pending and later operation fails with
// the first such cause.
//
// Thread safety: Enqueue*, handles() and the accessors may be called from any thread.
// Shutdown() (also run by the destructor) must not race with itself.
#ifndef HORA_RUNTIME_ENGINE_H_
#define HORA_RUNTIME_ENGINE_H_

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "collectives/communicator.h"
#include "common/status.h"
#include "coordinator/client.h"
#include "coordinator/messages.h"
#include "coordinator/service.h"
#include "runtime/bucket_executor.h"
#include "runtime/handle_table.h"
#include "runtime/options.h"
#include "runtime/tensor_queue.h"

namespace hora {

class Engine {
 public:
  static StatusOr<std::unique_ptr<Engine>> Start(const Options& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates the request (shape, dtype, op, root, splits, buffers) and queues it; returns the
  // handle. The calling thread writes the ready notice to the coordinator itself (one short
  // stream write; on rank 0 a call into the in-process coordinator), so it never waits for
  // other ranks, but it can wait for a slow stream. `output` is ignored by collectives whose result the
  // runtime holds (allgather, reducescatter, alltoall).
  StatusOr<int64_t> Enqueue(TensorSpec spec, const void* input, void* output);
  StatusOr<int64_t> EnqueueBarrier();
  StatusOr<int64_t> EnqueueJoin();

  HandleTable& handles() { return handles_; }
  const Options& options() const { return options_; }
  const RankInfo& self() const { return topology_.ranks[options_.rank]; }

  // OK while healthy, else the sticky error.
  Status AsyncError() const;

  // Stops the background thread; pending operations fail with ABORTED. Idempotent.
  Status Shutdown();

 private:
  explicit Engine(const Options& options);
  Status Init();
  void BackgroundLoop();
  void AnnounceFresh();
  // The name this rank gave `id`, or "" if unknown.
  std::string NameOf(int32_t id);
  void HandlePlan(const PlanMessage& plan);
  // Runs on the client's reader thread: completes what needs no collective (tensor errors and
  // inline-reduced buckets) at once, and queues the rest for the background thread.
  void OnPlan(PlanMessage plan);
  void CompleteInline(const BucketPlan& bucket);
  void RunBucket(const BucketPlan& bucket);
  void SetError(Status status);
  void FailEverything(const Status& status);
  Status ValidateSpec(const TensorSpec& spec, const void* input, const void* output) const;

  // Constant after Init.
  const Options options_;
  Topology topology_;
  std::unique_ptr<CoordinatorService> service_;  // rank 0 only
  std::unique_ptr<CoordinatorClient> client_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<BucketExecutor> executor_;

  HandleTable handles_;
  TensorQueue queue_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                    // guarded by mu_
  std::deque<PlanMessage> inbox_;        // guarded by mu_
  std::deque<int> join_done_;            // guarded by mu_
  Status error_;                         // guarded by mu_: the sticky error
  bool error_handled_ = false;           // guarded by mu_: pending ops failed with error_
  int64_t barrier_count_ = 0;            // guarded by mu_
  int64_t join_handle_ = 0;              // guarded by mu_: the pending join, 0 if none

  // Tensor ids. New requests are announced by the enqueuing thread itself (no wake-up of the
  // background thread on the latency path); the background thread maps plan ids back to names.
  std::mutex announce_mu_;
  std::unordered_map<std::string, uint32_t> ids_;      // guarded by announce_mu_: name -> id
  std::unordered_map<uint32_t, TensorSpec> id_specs_;  // guarded by announce_mu_: last announced
  std::unordered_map<uint32_t, std::string> id_names_; // guarded by announce_mu_
  uint32_t next_id_ = 0;                               // guarded by announce_mu_

  std::thread thread_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_ENGINE_H_
