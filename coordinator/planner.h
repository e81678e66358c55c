// The planner: the coordinator's pure logic. Plain structs in, plain structs out; no I/O, no
// threads, no clock of its own (every call takes `now`). The gRPC service (service.h) owns one
// and calls it under its lock; unit tests feed it tables directly.
//
// What it does, per job:
//   Readiness  Each rank submits TensorSpecs by name. A name is complete when every rank
//              that has not joined has submitted it.
//   Validation When a name is complete, a spec that a rank submitted as refused (it could not
//              make the operation) fails the name on every rank with that rank's reason. Else
//              its specs are compared field by field across ranks
//              (collective, dtype, op, shape, root, prescale, postscale, device). Allgather and
//              alltoall compare shape[1:] only. Any difference becomes a TensorFailure
//              (code kMismatch) for every rank, naming the field and which ranks had which
//              value: "tensor 'w': shape differs across ranks: [4] on ranks 0,2; [5] on rank 1".
//              Then per-collective sanity, kInvalidArgument naming the rank: no negative
//              dimension; allgather, alltoall and reducescatter need ndim >= 1; broadcast
//              root in [0, size); alltoall splits have `size` non-negative entries summing
//              to shape[0], or are empty (even split: shape[0] % size == 0). Barrier has no
//              data: its dtype and shape are not compared.
//   Fusion     Complete allreduce (and broadcast) tensors with the same (collective, dtype, op,
//              root, prescale, postscale, device) are fused into one bucket up to
//              fusion_threshold_bytes (a tensor larger than it goes alone). Allgather,
//              reducescatter, alltoall and barrier go one tensor per bucket.
//   Emission   A group of fusable complete tensors goes out as soon as it is full, or when no
//              tensor of the same key is still partially submitted (nothing more is coming
//              soon), or when its oldest tensor has waited cycle_time. No fixed tick.
//   Order      Buckets get consecutive seq numbers; the service sends them to every rank in
//              that order, so all ranks run the same collectives in the same sequence.
//   Send/recv  A send from s to d and the matching recv (the same name, chosen by the ranks
//              from (s, d, tag, n)) are complete when both s and d submitted; the other ranks
//              and joins play no part. Validation: one send and one recv naming each other,
//              the same dtype, device and element count. Each pair is a bucket of its own
//              whose participants are {s, d} and root is s.
//   Join       A rank that joined counts as having submitted every allreduce (with zeros) until
//              all ranks have joined; then Poll reports join_done with the last rank to join.
//              Other collectives that need a joined rank fail with kInvalidArgument.
//   Stalls     Stalled() lists names submitted by some ranks but not all for longer than a
//              given age, with the ranks that are missing.
#ifndef HORA_COORDINATOR_PLANNER_H_
#define HORA_COORDINATOR_PLANNER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/limits.h"
#include "common/status.h"
#include "common/types.h"

namespace hora {

using Clock = std::chrono::steady_clock;
using TimePoint = Clock::time_point;

struct PlannerConfig {
  int size = 1;
  int64_t fusion_threshold_bytes = kDefaultFusionThresholdBytes;
  std::chrono::microseconds cycle_time = kDefaultCycleTime;
};

// A bucket as the planner decides it, by tensor name (the service maps names to rank ids).
struct PlannedBucket {
  struct Entry {
    std::string name;
    // allreduce / broadcast / reducescatter: the tensor's elements. allgather / alltoall:
    // the elements of one row (product of shape[1:], equal on every rank); multiply by
    // first_dims / splits. barrier: 0.
    int64_t num_elements = 0;
    std::vector<int64_t> first_dims;           // allgather: per rank
    std::vector<std::vector<int64_t>> splits;  // alltoall: splits[sender][receiver], in rows
                                               // (even splits filled in)
    uint64_t layout = 0;                       // a digest of first_dims and splits (0: neither)
    std::vector<bool> submitted;               // per rank: false where the rank joined instead
    // Arrivals, for the timeline: the rank whose submission completed the name, and per rank
    // its submission time after the first rank's in microseconds (-1 where not submitted).
    int last_rank = -1;
    std::vector<int64_t> arrival_us;
    // Per rank: the tag its submission carried (Submit; -1 where none or not submitted). The
    // service passes each rank's own id for the name, so a plan needs no lookup per rank.
    std::vector<int32_t> tags;
  };
  uint64_t seq = 0;
  CollectiveType collective = CollectiveType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  Device device = Device::kCpu;
  std::vector<int> participants;  // empty = every rank; send/recv: {sender, receiver}
  int joined_ranks = 0;           // ranks joined when the entries became complete (never mixed)
  std::vector<Entry> entries;     // in (completion time, name) order
};

// A name that failed; delivered to every rank that submitted it.
struct TensorFailure {
  std::string name;
  std::vector<bool> submitted;  // per rank
  Status status;
};

struct StallReport {
  std::string name;
  CollectiveType collective = CollectiveType::kAllreduce;  // as the first ready rank made it
  std::vector<int> ready_ranks;
  std::vector<int> missing_ranks;
  std::chrono::milliseconds age{0};
};

struct PlannerOutput {
  // In seq order: by completion time of the bucket's first entry, ties by name.
  std::vector<PlannedBucket> buckets;
  std::vector<TensorFailure> failures;  // by the time they were found, ties by name
  bool join_done = false;
  int last_joined_rank = -1;
};

// Where a rank's name lives in one planner, kept by the caller beside the rank's spec (the
// core: per rank and id), so that the next Submit of that name skips the lookup by name: at
// 1,024 ranks hashing and comparing names was a third of the planner's time
// (docs/coordinator-scale.md). A planner keeps a name's entry between steps; a hint stays
// valid until the planner forgets names idle for a while (then each hint is looked up once
// more). A default hint is never valid; a hint must follow one spec's name and one planner.
struct PlannerHint {
  uint64_t epoch = 0;
  void* name = nullptr;
};

class Planner {
 public:
  explicit Planner(const PlannerConfig& config);
  ~Planner();
  Planner(const Planner&) = delete;
  Planner& operator=(const Planner&) = delete;

  // Records that `rank` submitted `spec`. A second submission of a name by the same rank
  // while the first is pending fails that name (kAlreadyExists) for that rank alone; it is
  // reported by the next Poll. A name is in flight from its first submission until it is
  // emitted or fails; then it may be submitted again.
  // REQUIRES: 0 <= rank < config.size (checked).
  // Cost: a hash lookup by name (none with a valid `hint`, which Submit fills in) and a
  // comparison with the spec already kept (a copy only when it differs); O(size) once, when
  // the name completes. tag: returned in the bucket's entry (Entry::tags) for this rank.
  void Submit(int rank, const TensorSpec& spec, TimePoint now, int32_t tag = -1,
              PlannerHint* hint = nullptr);

  // hora_join from `rank`. A second Join from a rank already joined is ignored.
  // Cost: one pass over the names in flight.
  void Join(int rank, TimePoint now);

  // Everything that can go out at `now`.
  PlannerOutput Poll(TimePoint now);

  // The earliest time at which Poll may emit something without a new Submit or Join
  // (a cycle-time flush); TimePoint::max() when nothing waits. TimePoint::min() when
  // Submit or Join produced something that no Poll has reported yet.
  TimePoint NextDeadline() const;

  // Names pending on some ranks but not all for at least `older_than` (since the first
  // submission), sorted by name. Joined ranks are not missing. Cost: one pass over the names.
  std::vector<StallReport> Stalled(TimePoint now, std::chrono::milliseconds older_than) const;

  // Number of names with at least one submission and not yet emitted.
  size_t PendingCount() const;

  // The autotuner (coordinator/autotuner.h) changes the fusion threshold and cycle time from
  // now on. Tensors already waiting are judged with the new values at the next Poll (a smaller
  // threshold may make their buckets full; a shorter cycle time may make them due).
  // REQUIRES: fusion_threshold_bytes >= 0, cycle_time >= 0 (checked).
  void SetTuning(int64_t fusion_threshold_bytes, std::chrono::microseconds cycle_time);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace hora

#endif  // HORA_COORDINATOR_PLANNER_H_
