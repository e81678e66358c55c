// The simulated ranks of the local and grpc modes: one real CoordinatorClient per rank,
// driven by a few threads, each rank's plans checked as they arrive (coordinator_scale.h).
#ifndef HORA_TOOLS_BENCH_COORDINATOR_SCALE_RANKS_H_
#define HORA_TOOLS_BENCH_COORDINATOR_SCALE_RANKS_H_

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "coordinator/client.h"
#include "coordinator/service.h"
#include "tools/bench/coordinator_scale.h"

namespace hora {
namespace scale_bench {

constexpr char kBenchToken[] = "coordinator-scale-bench";
constexpr char kBenchDigest[] = "coordinator-scale-bench";

// The service's configuration for `ranks` simulated ranks: defaults but the token, digest and
// a start timeout that fits 1,024 connecting clients on a small machine.
CoordinatorConfig BenchServiceConfig(int ranks);

class SimulatedRanks {
 public:
  explicit SimulatedRanks(const ScaleOptions& options);
  ~SimulatedRanks();  // closes every client

  // Connects every rank (concurrently: Join waits for all) to `address`, sessions through
  // `local` when it is not null, and starts the sessions.
  Status Connect(const std::string& address, LocalSessionHost* local);
  // One step: every rank announces every tensor (with signatures when `signatures`), then
  // waits until every rank has all its plans, at most options.step_timeout.
  Status Step(int step, bool signatures);
  // Every rank saw the same (seq, tensor) sequence.
  Status CheckSameOrder() const;
  // Goodbye from every rank (bounded by the client's own limits).
  void Close();

  // Counters since the last ResetCounters: plan messages to all ranks, their protobuf bytes
  // as measured on rank 0 times the number of ranks, and rank 0's buckets.
  void ResetCounters();
  double messages_out() const;
  double bytes_out() const;
  double buckets() const;
  // Protobuf bytes of one step's ready messages (id-only notices), all ranks.
  double BytesInPerStep() const;
  int64_t MessagesInPerStep() const;

 private:
  struct Sink {
    explicit Sink(int tensors) : checker(tensors) {}
    PlanChecker checker;   // touched only by the rank's delivering thread until a step ends
    int64_t messages = 0;  // guarded by mu_
    int64_t bytes = 0;     // rank 0 only; guarded by mu_
    int64_t buckets = 0;   // guarded by mu_
  };

  void OnPlan(int rank, PlanMessage plan);
  void OnAbort(int rank, const Status& status);
  std::vector<ReadyNotice> Notices(int begin, int end, bool signatures) const;

  const ScaleOptions options_;
  const std::vector<TensorSpec> specs_;
  std::vector<std::unique_ptr<CoordinatorClient>> clients_;
  std::vector<std::unique_ptr<Sink>> sinks_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  int64_t entries_ = 0;  // guarded by mu_: plan entries received by all ranks, all steps
  int64_t target_ = 0;   // guarded by mu_: entries_ at which the current step is done
  std::string error_;    // guarded by mu_: the first failure
};

}  // namespace scale_bench
}  // namespace hora

#endif  // HORA_TOOLS_BENCH_COORDINATOR_SCALE_RANKS_H_
