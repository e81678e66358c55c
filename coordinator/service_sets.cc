// Process sets at the coordinator: one planner per set, and the collective add / remove.
//
// Every rank sends its n-th ProcessSetOp with seq = n, in the same order as every other rank.
// When all ranks have sent their n-th, the coordinator compares them: equal requests are
// carried out (add: a new set with the next id; remove: the set and its planner are gone) and
// every rank gets the same ProcessSetResult; requests that differ fail on every rank, naming
// which ranks asked for what. A request that not every rank sends within the start timeout
// fails on the ranks that sent it, naming the ranks that did not; a late rank gets the same
// answer at once, so the ranks' seq numbers never fall out of step.
#include <algorithm>

#include "common/logging.h"
#include "coordinator/core.h"

namespace hora {
namespace {

std::string RanksText(const std::vector<int32_t>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "]";
}

std::string DescribeOp(const ProcessSetOp& op) {
  if (op.remove) return "remove process set " + std::to_string(op.process_set);
  std::string s = "add process set " + RanksText(op.ranks);
  if (!op.cpu_operations.empty()) s += " with cpu operations " + op.cpu_operations;
  return s;
}

bool SameOp(const ProcessSetOp& a, const ProcessSetOp& b) {
  if (a.remove != b.remove) return false;
  if (a.remove) return a.process_set == b.process_set;
  return a.ranks == b.ranks && a.cpu_operations == b.cpu_operations;
}

}  // namespace

CoordinatorCore::SetState* CoordinatorCore::FindSetLocked(int32_t id) {
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : &it->second;
}

void CoordinatorCore::AddSetLocked(int32_t id, std::vector<int> ranks, std::string cpu_operations) {
  SetState set;
  set.id = id;
  set.index_of.assign(config_.size, -1);
  for (size_t i = 0; i < ranks.size(); ++i) set.index_of[ranks[i]] = static_cast<int>(i);
  PlannerConfig pc = config_.planner;
  pc.size = static_cast<int>(ranks.size());
  if (tuner_ != nullptr) {  // a set added while (or after) tuning plans with the current point
    pc.fusion_threshold_bytes = tuner_->Current().fusion_threshold_bytes;
    pc.cycle_time = std::chrono::microseconds(tuner_->Current().cycle_time_us);
  }
  set.planner = std::make_unique<Planner>(pc);
  set.ranks = std::move(ranks);
  set.cpu_operations = std::move(cpu_operations);
  sets_[id] = std::move(set);
}

Status CoordinatorCore::CheckMembershipLocked(int rank, const TensorSpec& spec, SetState** set) {
  *set = FindSetLocked(spec.process_set);
  if (*set != nullptr && (*set)->index_of[rank] >= 0) return Status::Ok();  // the hot path
  const std::string what =
      std::string(CollectiveName(spec.collective)) + " " + DescribeTensor(TensorKeyOf(spec));
  if (*set == nullptr) {
    return InvalidArgument(what + ": process set " + std::to_string(spec.process_set) +
                           " does not exist (never added, or removed)");
  }
  return InvalidArgument(what + ": rank " + std::to_string(rank) +
                         " is not a member of process set " + std::to_string(spec.process_set) +
                         " (ranks " + JoinRanks((*set)->ranks) + ")");
}

void CoordinatorCore::HandleSetOpLocked(int rank, const ProcessSetOp& op, Touched* touched) {
  RankState& state = ranks_[rank];
  if (op.seq != state.next_set_op) {
    ProcessSetResult r;
    r.seq = op.seq;
    r.status = InvalidArgument("process set operation #" + std::to_string(op.seq) + " from rank " +
                               std::to_string(rank) + " is out of order (expected #" +
                               std::to_string(state.next_set_op) + ")");
    SendSetResultLocked(rank, r, touched);
    return;
  }
  ++state.next_set_op;
  auto [it, inserted] = set_ops_.try_emplace(op.seq);
  PendingSetOp& p = it->second;
  if (inserted) {
    p.first = Clock::now();
    p.requests.resize(config_.size);
    WakeTimerLocked(p.first + config_.start_timeout);
  }
  p.requests[rank] = op;
  ++p.received;
  if (p.resolved) {
    SendSetResultLocked(rank, p.result, touched);
  } else if (p.received == config_.size) {
    p.result = ResolveSetOpLocked(op.seq, p);
    p.resolved = true;
    for (int r = 0; r < config_.size; ++r) SendSetResultLocked(r, p.result, touched);
  }
  if (p.received == config_.size) set_ops_.erase(it);
}

ProcessSetResult CoordinatorCore::ResolveSetOpLocked(uint64_t seq, const PendingSetOp& p) {
  ProcessSetResult result;
  result.seq = seq;
  const ProcessSetOp& ref = *p.requests[0];
  for (int r = 0; r < config_.size; ++r) {
    if (p.requests[r]->refused.empty()) continue;
    result.status = InvalidArgument("process set operation #" + std::to_string(seq) + " (" +
                                    DescribeOp(*p.requests[r]) + ") refused by rank " +
                                    std::to_string(r) + ": " + p.requests[r]->refused);
    return result;
  }
  bool differ = false;
  for (int r = 1; r < config_.size; ++r) differ |= !SameOp(ref, *p.requests[r]);
  if (differ) {
    std::vector<std::pair<std::string, std::vector<int>>> groups;
    for (int r = 0; r < config_.size; ++r) {
      const std::string d = DescribeOp(*p.requests[r]);
      auto g =
          std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == d; });
      if (g == groups.end()) {
        groups.push_back({d, {r}});
      } else {
        g->second.push_back(r);
      }
    }
    std::string msg = "process set operation #" + std::to_string(seq) + " differs across ranks: ";
    for (size_t i = 0; i < groups.size(); ++i) {
      msg += (i ? "; " : "") + groups[i].first + " on " +
             (groups[i].second.size() == 1 ? "rank " : "ranks ") + JoinRanks(groups[i].second);
    }
    result.status = InvalidArgument(msg +
                                    " (every rank must add and remove the same sets in the "
                                    "same order)");
    return result;
  }
  if (ref.remove) {
    result.process_set = ref.process_set;
    if (ref.process_set == kGlobalProcessSet) {
      result.status = InvalidArgument("the global process set (0) cannot be removed");
    } else if (FindSetLocked(ref.process_set) == nullptr) {
      result.status = Status(Code::kNotFound, "process set " + std::to_string(ref.process_set) +
                                                  " does not exist (never added, or removed)");
    } else {
      result.ranks = sets_[ref.process_set].ranks;
      sets_.erase(ref.process_set);
      HORA_LOG_INFO("coordinator: removed process set {}", ref.process_set);
    }
    return result;
  }
  std::vector<int> ranks(ref.ranks.begin(), ref.ranks.end());
  bool valid = !ranks.empty() && std::is_sorted(ranks.begin(), ranks.end()) &&
               std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end() &&
               ranks.front() >= 0 && ranks.back() < config_.size;
  if (!valid) {
    result.status = InvalidArgument("process set ranks " + RanksText(ref.ranks) +
                                    " must be distinct ranks in [0, " +
                                    std::to_string(config_.size) + "), sorted, at least one");
    return result;
  }
  for (const auto& [id, set] : sets_) {
    if (set.ranks == ranks) {
      result.status =
          Status(Code::kAlreadyExists, "a process set with ranks " + RanksText(ref.ranks) +
                                           " already exists (id " + std::to_string(id) + ")");
      return result;
    }
  }
  result.process_set = next_set_id_++;
  result.ranks = ref.ranks;
  AddSetLocked(result.process_set, std::move(ranks), ref.cpu_operations);
  HORA_LOG_INFO("coordinator: added process set {} with ranks {}", result.process_set,
                RanksText(ref.ranks));
  return result;
}

void CoordinatorCore::SendSetResultLocked(int rank, const ProcessSetResult& result,
                                          Touched* touched) {
  const std::shared_ptr<SessionStream>& session = ranks_[rank].session;
  if (!session) return;
  CoordinatorMessage message;
  message.kind = CoordinatorMessage::Kind::kProcessSetResult;
  message.set_result = result;
  session->Push(std::move(message));
  touched->Add(session);
}

void CoordinatorCore::CheckSetOpTimeoutsLocked(TimePoint now, Touched* touched) {
  for (auto& [seq, p] : set_ops_) {
    if (p.resolved || now < p.first + config_.start_timeout) continue;
    std::vector<int> missing;
    for (int r = 0; r < config_.size; ++r) {
      if (!p.requests[r]) missing.push_back(r);
    }
    const ProcessSetOp* any = nullptr;
    for (const auto& req : p.requests) {
      if (req) any = &*req;
    }
    p.resolved = true;
    p.result.seq = seq;
    p.result.status = DeadlineExceeded(
        "process set operation #" + std::to_string(seq) + " (" + (any ? DescribeOp(*any) : "") +
        ") was not made by " + (missing.size() == 1 ? "rank " : "ranks ") + JoinRanks(missing) +
        " within " + FormatSeconds(config_.start_timeout) +
        " (adding and removing process sets is collective: every rank must call it)");
    for (int r = 0; r < config_.size; ++r) {
      if (p.requests[r]) SendSetResultLocked(r, p.result, touched);
    }
  }
}

TimePoint CoordinatorCore::NextSetDeadlineLocked() const {
  TimePoint t = TimePoint::max();
  for (const auto& [id, set] : sets_) t = std::min(t, set.planner->NextDeadline());
  for (const auto& [seq, p] : set_ops_) {
    if (!p.resolved) t = std::min(t, p.first + config_.start_timeout);
  }
  return t;
}

}  // namespace hora
