// The coordinator at scale: simulated ranks against the real Planner and the real service.
//
// One step = every rank announces the same `tensors` tensors at once (in messages of `batch`
// notices; by default as the runtime sends such a burst: CoordinatorClient::kUnbatchedNotices
// messages of one notice, then the rest in one, runtime/engine.h "Notice batching") and the step
// ends when every rank has received the plans for all of them. Messages go out chunk by chunk
// across ranks (chunk 0 of every rank, then chunk 1, ...), so the ranks progress at the same pace,
// as data-parallel ranks do in a backward pass.
//
// Modes (docs/coordinator-scale.md):
//   planner  one Planner on this thread, fed Submit per notice and Poll per message, as the
//            service's reader threads do; CPU is this thread's.
//   local    the real CoordinatorService and one real CoordinatorClient per rank, sessions
//            through LocalSessionHost (function calls, no stream): the service's logic and
//            protobuf building without the transport. CPU is the whole process's (service,
//            clients and drivers together: an upper bound for the service).
//   grpc     the real service in a child process (this binary with --serve) and one real
//            CoordinatorClient per rank over loopback gRPC in this one; CPU is the child's.
//            With --relay=1 the ranks of each simulated host of 8 (but rank 0's) reach the
//            child through a host relay (coordinator/host_relay.h) run by their client of
//            the host's lowest rank, in this process.
//
// Every wait has a deadline (`step_timeout`); a run that misses one ends with an error.
#ifndef HORA_TOOLS_BENCH_COORDINATOR_SCALE_H_
#define HORA_TOOLS_BENCH_COORDINATOR_SCALE_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace hora {
namespace scale_bench {

struct ScaleOptions {
  std::string mode = "planner";  // planner, local or grpc
  int ranks = 64;
  int tensors = 200;   // per step
  int batch = 0;       // notices per ready message; 0: as the runtime (NoticeChunks)
  int steps = 20;      // timed
  int warmup = 2;      // untimed; the first also carries the signatures
  int drivers = 4;     // threads sending the ranks' ready messages (local, grpc)
  bool relay = false;  // grpc: each simulated host's ranks go through a host relay
  std::chrono::milliseconds step_timeout{120000};
  std::string self_path;  // this binary, for the grpc mode's child
};

// The [begin, end) ranges of tensors that go out in one ready message each, in order.
std::vector<std::pair<int, int>> NoticeChunks(const ScaleOptions& o);

struct ScaleResult {
  ScaleOptions options;
  double wall_s = 0;        // timed steps
  double cpu_s = 0;         // rank 0: planner thread / process / service child
  double client_cpu_s = 0;  // grpc: this process (the simulated ranks); else 0
  double messages_in = 0;   // per step, into the coordinator
  double messages_out = 0;  // per step, out of it (all ranks)
  double bytes_in = 0;      // per step, protobuf bytes (0 = not measured)
  double bytes_out = 0;
  double buckets = 0;  // per step
  double steps_per_s() const { return options.steps / wall_s; }
  double cpu_ms_per_step() const { return 1e3 * cpu_s / options.steps; }
};

// The simulated model: `count` tensors, alternating weights (256 KiB to 4 MiB) and biases
// (4 KiB), named like a transformer's parameters. Deterministic.
std::vector<TensorSpec> ModelTensors(int count);

// CPU seconds of this thread / this process.
double ThreadCpuSeconds();
double ProcessCpuSeconds();

// Checks what one rank receives: every entry is one of the step's tensors, each exactly once
// per step, and the sequence of (seq, tensor) is folded into a hash that must be equal on
// every rank. Ids are tensor index + 1 on every rank. Not thread-safe (one per rank).
class PlanChecker {
 public:
  explicit PlanChecker(int tensors) : seen_(tensors, false) {}
  // Records one bucket's entries; false (with error()) on a bad or repeated id.
  bool Entry(uint64_t seq, int32_t id);
  // Ends a step: OK when every tensor arrived exactly once.
  Status EndStep(int rank, int step);
  uint64_t hash() const { return hash_; }
  const std::string& error() const { return error_; }

 private:
  std::vector<bool> seen_;
  int count_ = 0;
  uint64_t hash_ = 1469598103934665603ull;
  std::string error_;
};

StatusOr<ScaleResult> RunPlannerBench(const ScaleOptions& options);
StatusOr<ScaleResult> RunServiceBench(const ScaleOptions& options);

// The grpc mode's child: serves a coordinator for `ranks`, prints "port N", then answers
// "cpu" with "cpu <process cpu ns>" and ends on "quit" or end of input. Returns the exit code.
int ServeMain(int ranks, std::chrono::milliseconds timeout);

}  // namespace scale_bench
}  // namespace hora

#endif  // HORA_TOOLS_BENCH_COORDINATOR_SCALE_H_
