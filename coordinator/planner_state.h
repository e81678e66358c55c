// The planner's tables and how a name moves through them:
//
//   names       every name submitted lately. A live name has at least one submission and
//               was not yet emitted or failed: while incomplete it holds each rank's spec;
//               once complete and valid it only marks the name as in flight (a second
//               submission is a duplicate). An idle name (emitted or failed) keeps its entry
//               for the next step, where callers' PlannerHints find it without a lookup;
//               names idle for kForgetIdle are forgotten (a new epoch voids the hints).
//   partial     per fusion key (without the joined count), how many incomplete names there
//               are. Zero means nothing more of that key is coming soon.
//   groups      complete, valid allreduce / broadcast tensors waiting to be fused, per
//               bucket key, kept sorted by (completion time, name), with their total bytes.
//   deadlines   (oldest completion + cycle_time, group) for every non-empty group.
//   dirty       groups that got tensors, or whose key lost its last incomplete name, since
//               the last Poll.
//   ready       complete non-fusable tensors, one bucket each.
//   failures    failures to report at the next Poll.
//
// Poll visits only dirty groups and groups whose deadline passed, so its cost follows the
// tensors that changed, not the number of names. Everything emitted in one Poll is ordered by
// (completion time of the bucket's first tensor, its name) and numbered from next_seq.
//
// Internal to the planner (planner.cc): the tables, and the state that holds them.
#ifndef HORA_COORDINATOR_PLANNER_STATE_H_
#define HORA_COORDINATOR_PLANNER_STATE_H_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "coordinator/planner.h"
#include "coordinator/planner_bucket_key.h"

namespace hora {
namespace planner_internal {

// A complete, valid tensor waiting to go out.
struct Ready {
  TimePoint completed;
  int64_t bytes = 0;
  PlannedBucket::Entry entry;
  bool operator<(const Ready& o) const {
    return std::tie(completed, entry.name) < std::tie(o.completed, o.entry.name);
  }
};

struct Group {
  std::vector<Ready> tensors;  // sorted
  int64_t bytes = 0;
  TimePoint deadline = TimePoint::max();  // in deadlines_ when not max()
  bool dirty = false;
};

using GroupMap = std::map<BucketKey, Group>;

// An idle name is forgotten after this long without a submission, at a Poll; forgetting is
// checked at most once per kForgetIdle. One-shot names (barriers, unnamed c10d calls) stay
// this long at most.
constexpr std::chrono::seconds kForgetIdle{10};

// Epochs are unique across planners: a hint from one is never valid in another.
inline std::atomic<uint64_t> next_epoch{1};

struct NameState {
  // Rank r's spec is distinct[spec_of[r]] (meaningful where submitted). Ranks almost always
  // submit equal specs, so one copy serves them all; a copy per rank was most of a
  // submission's cost at 1,024 ranks (docs/coordinator-scale.md).
  std::vector<TensorSpec> distinct;
  std::vector<uint32_t> spec_of;
  std::vector<bool> submitted;
  int submitted_count = 0;    // ranks with submitted[r]
  std::vector<int> required;  // send/recv: {sender, receiver}; empty = every rank
  TimePoint first_submit;
  std::vector<TimePoint> submit_time;  // per rank, meaningful where submitted
  std::vector<int32_t> tags;           // per rank (Submit's tag), meaningful where submitted
  int last_rank = -1;                  // the rank whose submission came last so far
  BucketKey fusion_key;                // of the first submission (joined = 0)
  bool counted = false;                // counted in partial[fusion_key]
  bool in_flight = false;              // complete and valid, waiting in a group or ready
  bool idle = true;                    // no submission since it was emitted or failed
  TimePoint idle_since;                // when it became idle (Retire)
  const std::string* name = nullptr;   // its key in names

  // The index in `distinct` of a spec equal to `spec`, keeping a copy when there is none.
  // Compares with the first and the last kept only (allgather's first dimension and
  // alltoall's splits differ per rank: those keep a copy per rank, as before). Names are
  // equal: `spec` was submitted under this entry's.
  uint32_t Keep(const TensorSpec& spec) {
    if (!distinct.empty() && EqualButName(distinct.front(), spec)) return 0;
    if (distinct.size() > 1 && EqualButName(distinct.back(), spec)) {
      return static_cast<uint32_t>(distinct.size() - 1);
    }
    distinct.push_back(spec);
    return static_cast<uint32_t>(distinct.size() - 1);
  }
};

// A bucket chosen by Poll, before it gets its seq.
struct Scheduled {
  TimePoint completed;
  std::string first_name;
  PlannedBucket bucket;
};

struct PendingFailure {
  TimePoint at;
  TensorFailure failure;
};

}  // namespace planner_internal

struct Planner::State {
  using BucketKey = planner_internal::BucketKey;
  using GroupMap = planner_internal::GroupMap;
  using NameState = planner_internal::NameState;
  using PendingFailure = planner_internal::PendingFailure;
  using Ready = planner_internal::Ready;
  using Scheduled = planner_internal::Scheduled;

  explicit State(const PlannerConfig& c)
      : config(c), joined(static_cast<size_t>(std::max(c.size, 0)), false) {}

  bool IsComplete(const NameState& s) const;
  void Complete(NameState& s, TimePoint now);
  // The name is no longer live (emitted or failed): its entry waits for the next step.
  void Retire(NameState& s, TimePoint now);
  // Erases the names idle for kForgetIdle; a new epoch when any went.
  void ForgetIdle(TimePoint now);
  void Uncount(NameState& s);
  void Enqueue(const BucketKey& key, Ready ready);
  void SetDeadline(GroupMap::iterator g);
  void MarkDirty(GroupMap::iterator g);
  void Flush(GroupMap::iterator g, TimePoint now, std::vector<Scheduled>* out);
  void Emit(const BucketKey& key, std::vector<Ready>::iterator begin,
            std::vector<Ready>::iterator end, std::vector<Scheduled>* out);

  PlannerConfig config;  // the autotuner may change the threshold and cycle time
  std::unordered_map<std::string, NameState> names;
  size_t idle_names = 0;  // of names
  uint64_t epoch = planner_internal::next_epoch.fetch_add(1);
  TimePoint last_forget = TimePoint::min();
  std::map<BucketKey, int> partial;
  GroupMap groups;
  std::set<std::pair<TimePoint, const BucketKey*>> deadlines;
  std::vector<GroupMap::iterator> dirty;
  std::vector<Scheduled> ready;
  std::vector<PendingFailure> failures;
  std::vector<bool> joined;
  int joined_count = 0;
  int last_joined = -1;
  bool join_done = false;
  int join_done_rank = -1;
  uint64_t next_seq = 0;
};

}  // namespace hora

#endif  // HORA_COORDINATOR_PLANNER_STATE_H_
