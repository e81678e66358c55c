// Plain structs for what crosses the control plane, shared by the planner, the gRPC service,
// the worker-side client and the runtime. Generated protobuf types never leave coordinator/.
#ifndef HORA_COORDINATOR_MESSAGES_H_
#define HORA_COORDINATOR_MESSAGES_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace hora {

constexpr int32_t kProtocolVersion = 2;

// Where each rank runs, as the coordinator answers Join.
struct RankInfo {
  int rank = 0;
  std::string hostname;
  int64_t pid = 0;
  int local_rank = 0;  // index among the ranks with the same hostname, in rank order
  int local_size = 1;
  int cross_rank = 0;  // index of this host among hosts, ordered by their lowest rank
  int cross_size = 1;
};

struct Topology {
  std::vector<RankInfo> ranks;  // indexed by rank
};

// A rank's Join: who it is and what it was started with.
struct JoinRequest {
  int32_t rank = 0;
  int32_t size = 0;
  std::string hostname;
  int64_t pid = 0;
  int32_t protocol_version = 0;
  std::string options_digest;  // "fusion_threshold=...;cpu_backend=..."
};

// A worker's notice that one tensor is ready. spec is set the first time `id` is used by this
// rank; later notices carry the id alone.
struct ReadyNotice {
  uint32_t id = 0;
  std::optional<TensorSpec> spec;
  // A small allreduce's data (prescaled), reduced by the coordinator itself.
  std::optional<std::string> payload;
};

// Whether a rank's tensor signature can be planned: the enums in range, the dimensions and
// splits non-negative and bounded, the element count without overflow, a name and a set.
// InvalidArgument names the tensor and the field.
Status CheckTensorSpec(const TensorSpec& spec);

// One bucket of a plan, as seen by the rank that receives it. Entries use that rank's ids.
struct BucketPlan {
  struct Entry {
    int32_t id = -1;  // -1: this rank has joined and contributes zeros
    int64_t num_elements = 0;
    std::vector<int64_t> first_dims;   // allgather: every rank's first dimension
    std::vector<int64_t> recv_splits;  // alltoall: rows received from each rank
    uint64_t layout = 0;               // digest of every rank's layout, equal on every rank (proto)
    std::string inline_result;         // inline_reduced: the reduced data, before postscale
    // Arrivals at the coordinator (for the timeline): the global rank whose submission came
    // last (-1: unknown), how long after the first rank's it came, and how long after this
    // rank's own (how long this rank waited for the others), in microseconds.
    int32_t last_rank = -1;
    int64_t lag_us = 0;
    int64_t wait_us = 0;
  };
  uint64_t seq = 0;  // per process set
  int32_t process_set = kGlobalProcessSet;
  // Set ranks taking part; empty = every member. Send/recv: {sender, receiver}.
  std::vector<int32_t> participants;
  CollectiveType collective = CollectiveType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  Device device = Device::kCpu;  // picks the set's communicator for the bucket
  int root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  int joined_ranks = 0;
  bool inline_reduced = false;  // the coordinator reduced every entry (small allreduces)
  std::vector<Entry> entries;
};

// hora_process_set_add / _remove: the n-th request of a rank (seq = n; collective, in the
// same order on every rank).
struct ProcessSetOp {
  uint64_t seq = 0;
  bool remove = false;
  std::vector<int32_t> ranks;  // add: the members, sorted global ranks
  std::string cpu_operations;  // add: backend for the set's CPU tensors; "" = the job's
  int32_t process_set = 0;     // remove: the id
  std::string refused;         // non-empty: the rank cannot make this request, and why
};

// The coordinator's answer to the n-th ProcessSetOp, the same for every rank.
struct ProcessSetResult {
  uint64_t seq = 0;
  Status status;
  int32_t process_set = 0;
  std::vector<int32_t> ranks;
};

// The autotuner's settings as the coordinator last announced them (every rank gets the same).
struct TuningNotice {
  int64_t fusion_threshold_bytes = 0;
  int64_t cycle_time_us = 0;
  int32_t trial = 0;  // the trial being measured; the number of trials once done
  bool done = false;  // the chosen settings, kept for the rest of the job
};

struct TensorErrorNotice {
  int32_t id = 0;
  Status status;
};

// Diagnosis (proto/coordinator.proto, step 4): the coordinator's request and a rank's answer.
struct DiagnosisRequest {
  uint64_t id = 0;
  std::string reason;
  std::chrono::milliseconds deadline{0};  // the rank answers within this
};

struct DiagnosisReport {
  enum class Python : int32_t { kNone = 0, kAnswered = 1, kSilent = 2 };
  uint64_t id = 0;
  std::string where;  // the main Python thread, innermost first (Python::kAnswered)
  Python python = Python::kNone;
  std::chrono::milliseconds python_wait{0};  // kSilent: how long the rank waited
  std::string last_completed;
  std::vector<std::string> pending;
  std::string detail;
};

// What the coordinator sends a rank in one message: buckets in global order, then errors.
struct PlanMessage {
  std::vector<BucketPlan> buckets;
  std::vector<TensorErrorNotice> errors;
};

// One message on a rank's session, worker to coordinator: what the coordinator's core handles.
// Rank 0's client hands it over by a function call; the gRPC adapters (a session stream, a
// host relay's stream) convert it from proto/coordinator.proto's WorkerMessage.
struct WorkerMessage {
  enum class Kind {
    kHello,  // rank
    kReady,  // ready, refused
    kHeartbeat,
    kGoodbye,
    kFailure,       // text: the rank's error, which aborts the job
    kJoinOp,        // process_set: hora_join
    kProcessSetOp,  // set_op
    kDiagnoseAsk,   // text: why the rank asks
    kDiagnosis,     // diagnosis: the answer to a DiagnosisRequest
    kTimings,       // timings: this rank's plans carry the arrivals (its timeline is on)
    kUnknown,       // a kind this version does not know (logged, ignored)
  };
  Kind kind = Kind::kHeartbeat;
  int32_t rank = 0;
  std::vector<ReadyNotice> ready;
  // Notices whose signature did not convert: each fails its tensor on this rank only.
  std::vector<TensorErrorNotice> refused;
  std::string text;
  int32_t process_set = 0;
  ProcessSetOp set_op;
  DiagnosisReport diagnosis;
  bool timings = false;
  Status malformed;      // kProcessSetOp, kDiagnosis: what did not convert from the wire
  int unknown_kind = 0;  // kUnknown: the wire's tag, for the log
};

// One message on a rank's session, coordinator to worker.
struct CoordinatorMessage {
  enum class Kind {
    kHeartbeat,
    kPlan,              // plan
    kAbort,             // abort: why the job ends (never OK)
    kJoinDone,          // process_set, last_joined_rank
    kProcessSetResult,  // set_result
    kTuning,            // tuning
    kDiagnose,          // diagnose
  };
  Kind kind = Kind::kHeartbeat;
  PlanMessage plan;
  Status abort;
  int32_t process_set = 0;
  int32_t last_joined_rank = -1;
  ProcessSetResult set_result;
  TuningNotice tuning;
  DiagnosisRequest diagnose;

  static CoordinatorMessage Abort(Status why) {
    CoordinatorMessage m;
    m.kind = Kind::kAbort;
    m.abort = std::move(why);
    return m;
  }
};

}  // namespace hora

#endif  // HORA_COORDINATOR_MESSAGES_H_
