// One process set as this rank sees it: its members and, when this rank is one of them, its
// communicator and its executor thread.
//
// The executor thread runs the set's buckets in the order the coordinator planned them (the
// same order on every member), one at a time: it takes the bucket's requests from the queue,
// starts the bucket (runtime/bucket_executor.h) and moves on. A synchronous communicator has
// finished by then and the thread completes the handles itself; for an asynchronous one the
// bucket's Work goes to the completion thread (runtime/completion_queue.h), which unpacks and
// completes. Sets run side by side, each on its own thread and communicator, so two sets
// that share ranks never wait for each other.
//
// Device buckets (BucketPlan::device != kCpu) run on the set's communicator for that device
// and device index, which the executor creates on the set's first bucket for it (through the
// host, collectively: every member sees the set's buckets in the same order). A creation that
// fails fails the bucket (the engine then breaks the job) and is sticky for that device.
//
// Thread safety: Push and Abort may be called from any thread; Start and Stop from the
// thread that owns the set (the engine, under its set lock).
#ifndef HORA_RUNTIME_PROCESS_SET_H_
#define HORA_RUNTIME_PROCESS_SET_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collectives/communicator.h"
#include "common/mutex.h"
#include "common/status.h"
#include "coordinator/messages.h"
#include "runtime/bucket_executor.h"
#include "runtime/completion_queue.h"
#include "runtime/handle_table.h"
#include "runtime/steady_path.h"
#include "runtime/tensor_queue.h"
#include "runtime/timeline.h"

namespace hora {

class ProcessSetRuntime {
 public:
  // What a set needs from the engine.
  class Host {
   public:
    virtual ~Host() = default;
    // The request this rank announced with tensor id `id`, taken out of the queue.
    virtual std::optional<Request> TakeRequest(int32_t id) = 0;
    virtual void Complete(int64_t handle, Status status, OpResult result) = 0;
    virtual void Complete(int64_t handle, Status status) = 0;  // no result
    // OK while the job is healthy, else the sticky error.
    virtual Status JobError() = 0;
    // A bucket failed with `status` while the job looked healthy. Returns the error its
    // handles get: the job's error once known (the coordinator usually names a dead rank).
    virtual Status BucketFailed(const Status& status) = 0;
    // This rank found why the job cannot go on (a stall it saw itself): every rank gets
    // `status` (through the coordinator) at once. Returns the error its handles get.
    virtual Status FailJob(const Status& status) = 0;
    // Builds the set's communicator for `device` / `index` (collective over the members;
    // bounded by the collective timeout). set_rank: this rank within the set. ordinal: how
    // many communicators of this device kind the set made before (the same on every member,
    // unlike `index`: each rank drives its own GPU), which keys the collective creation.
    virtual StatusOr<std::unique_ptr<Communicator>> CreateDeviceCommunicator(
        int32_t set, const std::vector<int>& ranks, int set_rank, Device device, int index,
        int ordinal) {
      (void)set, (void)ranks, (void)set_rank, (void)index, (void)ordinal;
      return FailedPrecondition(std::string("no ") + (device == Device::kCuda ? "CUDA" : "device") +
                                " communicator in this runtime");
    }
    // A request the steady path held goes to the queue: announced to the coordinator (it
    // fell back), or not (the steady path stopped: the engine fails what the queue holds).
    virtual void GiveBack(Request request, bool announce) = 0;
    // Whether a request named as `spec` is in the queue.
    virtual bool Queued(const TensorSpec& spec) = 0;
  };

  // ranks: the members (global ranks, sorted); global_rank: this process's rank in the job.
  // timeline (may be null; not owned) records each bucket while it is on.
  ProcessSetRuntime(int32_t id, std::vector<int> ranks, int global_rank, Host* host,
                    CompletionQueue* completion, Timeline* timeline = nullptr);
  ~ProcessSetRuntime();  // Stop()
  ProcessSetRuntime(const ProcessSetRuntime&) = delete;
  ProcessSetRuntime& operator=(const ProcessSetRuntime&) = delete;

  int32_t id() const { return id_; }
  const std::vector<int>& ranks() const { return ranks_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  int rank() const { return rank_; }  // within the set; -1 when this rank is not a member
  bool included() const { return rank_ >= 0; }
  // The CPU communicator's backend name, "" before Start or for non-members.
  std::string backend() const;

  // Members only: takes the set's CPU communicator and starts the executor thread; with a
  // steady board (steady.board) also the steady path (runtime/steady_path.h).
  void Start(std::unique_ptr<Communicator> cpu, SteadyPath::Parts steady = {},
             SteadyOptions steady_options = {});
  // The steady path, or null (off, or not a member). Valid until Stop.
  SteadyPath* steady() const { return steady_.get(); }
  // Queues buckets of this set, in plan order.
  void Push(std::vector<BucketPlan> buckets);
  // Ends the communicator's work in progress and later (the job is broken).
  void Abort(const Status& reason);
  // Waits until every bucket queued so far has finished (the set is being removed: its other
  // members run the same buckets). False if `timeout` passed first.
  bool Drain(std::chrono::milliseconds timeout);
  // Stops the executor thread (buckets not started are dropped; their requests stay in the
  // queue for the engine to fail) and waits for this set's work on the completion thread.
  // Idempotent.
  void Stop();

 private:
  struct InFlight;
  // A device communicator of the set and the executor over it (or why there is none).
  struct DeviceComm {
    std::unique_ptr<Communicator> comm;
    std::unique_ptr<BucketExecutor> executor;  // destroyed before comm (its pool frees on it)
    Status failed;
  };
  // The communicator and executor for the bucket's device (created on first use).
  Status Select(const BucketPlan& bucket, const std::vector<const Request*>& requests,
                Communicator** comm, BucketExecutor** executor);
  void Loop();
  void Run(const BucketPlan& bucket);
  void Finish(const std::shared_ptr<InFlight>& f, Status status);
  // Fills the timeline's record of a bucket about to start.
  void TraceStart(const BucketPlan& bucket, const std::vector<const Request*>& requests,
                  TimelineBucket* t, const Communicator* comm) const;

  // Constant after construction.
  const int32_t id_;
  const std::vector<int> ranks_;
  const int rank_;
  Host* const host_;
  CompletionQueue* const completion_;
  Timeline* const timeline_;

  // Set by Start, before the thread starts; used by that thread (Abort: any thread).
  std::unique_ptr<Communicator> cpu_;
  std::unique_ptr<BucketExecutor> executor_;
  // Keyed by (device, index); created and used by the thread; Abort reads it (any thread).
  mutable Mutex devices_mu_;
  std::map<std::pair<int, int>, DeviceComm> devices_ GUARDED_BY(devices_mu_);
  std::unique_ptr<SteadyPath> steady_;

  mutable Mutex mu_;
  CondVar cv_;
  std::deque<BucketPlan> inbox_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  bool running_ GUARDED_BY(mu_) = false;    // the thread is inside Run()
  size_t outstanding_ GUARDED_BY(mu_) = 0;  // buckets on the completion thread
  std::thread thread_;
};

}  // namespace hora

#endif  // HORA_RUNTIME_PROCESS_SET_H_
