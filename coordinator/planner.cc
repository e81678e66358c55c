// The Planner (planner.h) over its tables (planner_state.h).
#include "coordinator/planner.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

#include "common/logging.h"
#include "coordinator/planner_bucket_key.h"
#include "coordinator/planner_check.h"
#include "coordinator/planner_state.h"

namespace hora {

using planner_internal::BucketKey;
using planner_internal::BucketOf;
using planner_internal::CompleteName;
using planner_internal::Fusable;
using planner_internal::Group;
using planner_internal::GroupMap;
using planner_internal::KeyOf;
using planner_internal::kForgetIdle;
using planner_internal::NameState;
using planner_internal::next_epoch;
using planner_internal::PendingFailure;
using planner_internal::Ready;
using planner_internal::Scheduled;

bool Planner::State::IsComplete(const NameState& s) const {
  if (!s.required.empty()) {
    for (int r : s.required) {
      if (!s.submitted[r]) return false;
    }
    return true;
  }
  // Fewer submissions than ranks still working: incomplete, without a pass over the ranks
  // (which would make each name cost O(size^2) over its submissions).
  if (s.submitted_count + joined_count < config.size) return false;
  for (int r = 0; r < config.size; ++r) {
    if (!s.submitted[r] && !joined[r]) return false;
  }
  return true;
}

void Planner::State::Uncount(NameState& s) {
  if (!s.counted) return;
  s.counted = false;
  auto p = partial.find(s.fusion_key);
  if (--p->second > 0) return;
  partial.erase(p);
  // Nothing more of this key is coming soon: its waiting groups may go out.
  for (auto g = groups.lower_bound(s.fusion_key);
       g != groups.end() && g->first.SameFusion(s.fusion_key); ++g) {
    MarkDirty(g);
  }
}

// Validates a name that just became complete and moves it to a group, ready, or failures.
void Planner::State::Complete(NameState& s, TimePoint now) {
  Uncount(s);
  const CompleteName c{*s.name, s.distinct, s.spec_of, s.submitted, joined, config.size};
  Status status = planner_internal::CheckRefused(c);
  if (status.ok()) {
    status = s.required.empty() ? planner_internal::CheckComplete(c)
                                : planner_internal::CheckPointToPoint(c, s.required);
  }
  if (!status.ok()) {
    failures.push_back({now, TensorFailure{*s.name, s.submitted, std::move(status)}});
    Retire(s, now);
    return;
  }
  const TensorSpec& ref = c.spec(planner_internal::ReferenceRank(c));
  Ready r{now, static_cast<int64_t>(ref.ByteSize()), planner_internal::MakeEntry(c)};
  r.entry.last_rank = s.last_rank;
  r.entry.arrival_us.assign(config.size, -1);
  r.entry.tags.assign(config.size, -1);
  for (int rank = 0; rank < config.size; ++rank) {
    if (!s.submitted[rank]) continue;
    r.entry.tags[rank] = s.tags[rank];
    r.entry.arrival_us[rank] =
        std::chrono::duration_cast<std::chrono::microseconds>(s.submit_time[rank] - s.first_submit)
            .count();
  }
  const BucketKey key = KeyOf(ref, joined_count);
  s.in_flight = true;
  s.distinct.clear();
  if (Fusable(key.collective)) {
    Enqueue(key, std::move(r));
  } else {
    PlannedBucket b = BucketOf(key);
    if (!s.required.empty()) {
      b.collective = CollectiveType::kSend;  // one kind for the pair; root is the sender
      b.participants = s.required;
      b.root = s.required[0];
      b.joined_ranks = 0;
    }
    b.entries.push_back(std::move(r.entry));
    ready.push_back({now, *s.name, std::move(b)});
  }
}

void Planner::State::Retire(NameState& s, TimePoint now) {
  s.submitted.assign(s.submitted.size(), false);
  s.submitted_count = 0;
  s.required.clear();
  s.distinct.clear();
  s.last_rank = -1;
  s.in_flight = false;
  s.idle = true;
  s.idle_since = now;
  ++idle_names;
}

void Planner::State::ForgetIdle(TimePoint now) {
  if (last_forget == TimePoint::min()) last_forget = now;  // the first Poll
  if (idle_names == 0 || now - last_forget < kForgetIdle) return;
  last_forget = now;
  const size_t before = names.size();
  for (auto it = names.begin(); it != names.end();) {
    if (it->second.idle && now - it->second.idle_since >= kForgetIdle) {
      it = names.erase(it);
      --idle_names;
    } else {
      ++it;
    }
  }
  if (names.size() != before) epoch = next_epoch.fetch_add(1);
}

void Planner::State::Enqueue(const BucketKey& key, Ready ready_tensor) {
  auto g = groups.try_emplace(key).first;
  auto& v = g->second.tensors;
  // Completion times rarely go backwards: the insertion point is almost always the end.
  auto pos = v.end();
  while (pos != v.begin() && ready_tensor < *(pos - 1)) --pos;
  g->second.bytes += ready_tensor.bytes;
  v.insert(pos, std::move(ready_tensor));
  SetDeadline(g);
  MarkDirty(g);
}

void Planner::State::SetDeadline(GroupMap::iterator g) {
  Group& grp = g->second;
  const TimePoint d =
      grp.tensors.empty() ? TimePoint::max() : grp.tensors.front().completed + config.cycle_time;
  if (d == grp.deadline) return;
  if (grp.deadline != TimePoint::max()) deadlines.erase({grp.deadline, &g->first});
  grp.deadline = d;
  if (d != TimePoint::max()) deadlines.insert({d, &g->first});
}

void Planner::State::MarkDirty(GroupMap::iterator g) {
  if (g->second.dirty) return;
  g->second.dirty = true;
  dirty.push_back(g);
}

void Planner::State::Emit(const BucketKey& key, std::vector<Ready>::iterator begin,
                          std::vector<Ready>::iterator end, std::vector<Scheduled>* out) {
  Scheduled s{begin->completed, begin->entry.name, BucketOf(key)};
  for (auto it = begin; it != end; ++it) {
    Retire(names.find(it->entry.name)->second, it->completed);
    s.bucket.entries.push_back(std::move(it->entry));
  }
  out->push_back(std::move(s));
}

// Packs the group's tensors in order into buckets of at most fusion_threshold_bytes (a larger
// tensor alone). Every bucket but the last is full (the next tensor did not fit); the last is
// full when it reached the threshold. Full buckets go out; the rest goes out too when no
// tensor of the key is incomplete or the oldest waited cycle_time.
void Planner::State::Flush(GroupMap::iterator g, TimePoint now, std::vector<Scheduled>* out) {
  Group& grp = g->second;
  grp.dirty = false;
  const int64_t limit = config.fusion_threshold_bytes;
  BucketKey fusion_key = g->first;
  fusion_key.joined = 0;
  const bool all = partial.count(fusion_key) == 0 || grp.deadline <= now;
  if (!all && grp.bytes < limit) return;  // no bucket can be full
  auto& v = grp.tensors;
  auto begin = v.begin();
  int64_t bytes = 0;
  for (auto it = v.begin(); it != v.end(); ++it) {
    if (it != begin && bytes + it->bytes > limit) {
      Emit(g->first, begin, it, out);
      begin = it;
      bytes = 0;
    }
    bytes += it->bytes;
    if (bytes >= limit) {
      Emit(g->first, begin, it + 1, out);
      begin = it + 1;
      bytes = 0;
    }
  }
  if (all && begin != v.end()) {
    Emit(g->first, begin, v.end(), out);
    begin = v.end();
  }
  v.erase(v.begin(), begin);
  grp.bytes = bytes;
  if (v.empty()) grp.bytes = 0;
  SetDeadline(g);
  if (v.empty()) groups.erase(g);
}

Planner::Planner(const PlannerConfig& config) : state_(std::make_unique<State>(config)) {
  HORA_CHECK(config.size >= 1);
}

Planner::~Planner() = default;

void Planner::Submit(int rank, const TensorSpec& spec, TimePoint now, int32_t tag,
                     PlannerHint* hint) {
  State& st = *state_;
  HORA_CHECK(rank >= 0 && rank < st.config.size);
  auto fail_rank = [&](Status status) {
    std::vector<bool> who(st.config.size, false);
    who[rank] = true;
    st.failures.push_back({now, TensorFailure{spec.name, std::move(who), std::move(status)}});
  };
  const bool p2p = IsPointToPoint(spec.collective);
  if (p2p && (spec.peer < 0 || spec.peer >= st.config.size || spec.peer == rank)) {
    fail_rank(InvalidArgument(std::string(CollectiveName(spec.collective)) + " '" + spec.name +
                              "' on rank " + std::to_string(rank) + ": peer " +
                              std::to_string(spec.peer) + " is out of range [0, " +
                              std::to_string(st.config.size) + ") or the rank itself"));
    return;
  }
  NameState* found = nullptr;
  if (hint != nullptr && hint->epoch == st.epoch) {
    found = static_cast<NameState*>(hint->name);
#ifndef NDEBUG
    HORA_CHECK(*found->name == spec.name);  // a hint follows one name
#endif
  } else {
    auto [it, inserted] = st.names.try_emplace(spec.name);
    found = &it->second;
    if (inserted) {
      found->name = &it->first;
      ++st.idle_names;
    }
    if (hint != nullptr) *hint = PlannerHint{st.epoch, found};
  }
  NameState& s = *found;
  if (s.idle) {  // the name's first submission since it was created, emitted or failed
    s.idle = false;
    --st.idle_names;
    s.spec_of.resize(st.config.size);
    s.submitted.resize(st.config.size, false);  // all false: new, or reset by Retire
    s.submit_time.resize(st.config.size);
    s.tags.resize(st.config.size, -1);
    s.first_submit = now;
    if (p2p) {
      const bool send = spec.collective == CollectiveType::kSend;
      s.required = {send ? rank : spec.peer, send ? spec.peer : rank};
    }
    if (Fusable(spec.collective)) {
      s.fusion_key = KeyOf(spec, 0);
      s.counted = true;
      ++st.partial[s.fusion_key];
    }
  } else if (s.in_flight || s.submitted[rank]) {
    fail_rank(Status(Code::kAlreadyExists,
                     "tensor '" + spec.name + "' was submitted twice by rank " +
                         std::to_string(rank) + " while the first submission is still in flight"));
    return;
  } else if (!s.required.empty() &&
             std::find(s.required.begin(), s.required.end(), rank) == s.required.end()) {
    fail_rank(InvalidArgument("tensor '" + spec.name + "' is a transfer between ranks " +
                              std::to_string(s.required[0]) + " and " +
                              std::to_string(s.required[1]) + "; rank " + std::to_string(rank) +
                              " submitted it too"));
    return;
  }
  s.spec_of[rank] = s.Keep(spec);
  s.submitted[rank] = true;
  ++s.submitted_count;
  s.submit_time[rank] = now;
  s.tags[rank] = tag;
  s.last_rank = rank;
  if (st.IsComplete(s)) st.Complete(s, now);
}

void Planner::Join(int rank, TimePoint now) {
  State& st = *state_;
  HORA_CHECK(rank >= 0 && rank < st.config.size);
  if (st.joined[rank]) return;
  st.joined[rank] = true;
  ++st.joined_count;
  st.last_joined = rank;
  // Names waiting only for this rank are complete now. Sorted, so that failures and the
  // order of equal completion times never depend on hashing.
  std::vector<std::string> complete;
  for (const auto& [name, s] : st.names) {
    if (!s.idle && !s.in_flight && !s.submitted[rank] && s.required.empty() && st.IsComplete(s)) {
      complete.push_back(name);
    }
  }
  std::sort(complete.begin(), complete.end());
  for (const auto& name : complete) st.Complete(st.names.find(name)->second, now);
  if (st.joined_count == st.config.size) {
    st.join_done = true;
    st.join_done_rank = rank;
    st.joined.assign(st.config.size, false);
    st.joined_count = 0;
    st.last_joined = -1;
  }
}

PlannerOutput Planner::Poll(TimePoint now) {
  State& st = *state_;
  std::vector<Scheduled> out = std::move(st.ready);
  st.ready.clear();
  for (const auto& s : out) st.Retire(st.names.find(s.first_name)->second, now);
  st.ForgetIdle(now);
  std::vector<GroupMap::iterator> visit = std::move(st.dirty);
  st.dirty.clear();
  for (auto d = st.deadlines.begin(); d != st.deadlines.end() && d->first <= now; ++d) {
    auto g = st.groups.find(*d->second);
    if (!g->second.dirty) {
      g->second.dirty = true;
      visit.push_back(g);
    }
  }
  // Groups are visited once each; Flush may erase the group it visits, never another.
  for (auto g : visit) st.Flush(g, now, &out);
  std::sort(out.begin(), out.end(), [](const Scheduled& a, const Scheduled& b) {
    return std::tie(a.completed, a.first_name) < std::tie(b.completed, b.first_name);
  });
  PlannerOutput result;
  result.buckets.reserve(out.size());
  for (auto& s : out) {
    s.bucket.seq = st.next_seq++;
    result.buckets.push_back(std::move(s.bucket));
  }
  std::stable_sort(st.failures.begin(), st.failures.end(),
                   [](const PendingFailure& a, const PendingFailure& b) {
                     return std::tie(a.at, a.failure.name) < std::tie(b.at, b.failure.name);
                   });
  for (auto& f : st.failures) result.failures.push_back(std::move(f.failure));
  st.failures.clear();
  result.join_done = st.join_done;
  result.last_joined_rank = st.join_done ? st.join_done_rank : -1;
  st.join_done = false;
  st.join_done_rank = -1;
  return result;
}

TimePoint Planner::NextDeadline() const {
  const State& st = *state_;
  if (!st.ready.empty() || !st.dirty.empty() || !st.failures.empty() || st.join_done) {
    return TimePoint::min();  // Poll has something to say now
  }
  return st.deadlines.empty() ? TimePoint::max() : st.deadlines.begin()->first;
}

std::vector<StallReport> Planner::Stalled(TimePoint now,
                                          std::chrono::milliseconds older_than) const {
  const State& st = *state_;
  std::vector<StallReport> reports;
  for (const auto& [name, s] : st.names) {
    if (s.idle || s.in_flight || now - s.first_submit < older_than) continue;
    StallReport r;
    r.name = name;
    for (int rank = 0; rank < st.config.size; ++rank) {
      const bool needed = s.required.empty() ? !st.joined[rank]
                                             : std::find(s.required.begin(), s.required.end(),
                                                         rank) != s.required.end();
      if (s.submitted[rank]) {
        r.ready_ranks.push_back(rank);
      } else if (needed) {
        r.missing_ranks.push_back(rank);
      }
    }
    if (!s.distinct.empty()) r.collective = s.distinct.front().collective;
    r.age = std::chrono::duration_cast<std::chrono::milliseconds>(now - s.first_submit);
    reports.push_back(std::move(r));
  }
  std::sort(reports.begin(), reports.end(),
            [](const StallReport& a, const StallReport& b) { return a.name < b.name; });
  return reports;
}

size_t Planner::PendingCount() const { return state_->names.size() - state_->idle_names; }

void Planner::SetTuning(int64_t fusion_threshold_bytes, std::chrono::microseconds cycle_time) {
  HORA_CHECK(fusion_threshold_bytes >= 0 && cycle_time.count() >= 0);
  State& st = *state_;
  st.config.fusion_threshold_bytes = fusion_threshold_bytes;
  st.config.cycle_time = cycle_time;
  for (auto g = st.groups.begin(); g != st.groups.end(); ++g) {
    st.SetDeadline(g);
    st.MarkDirty(g);
  }
}

}  // namespace hora
