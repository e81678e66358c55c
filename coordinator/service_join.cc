// Join: every rank announces itself once; all Joins return the topology when the last rank
// has joined, or fail together at the start deadline naming the ranks that are missing.
#include <map>
#include <sstream>

#include "common/logging.h"
#include "common/mutex.h"
#include "coordinator/core.h"

namespace hora {
namespace {

std::map<std::string, std::string> ParseDigest(const std::string& digest) {
  std::map<std::string, std::string> fields;
  std::stringstream ss(digest);
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    fields[item.substr(0, eq)] = eq == std::string::npos ? "" : item.substr(eq + 1);
  }
  return fields;
}

}  // namespace

Topology ComputeTopology(std::vector<RankInfo> ranks) {
  std::map<std::string, int> host_index;  // hostname -> cross rank
  std::map<std::string, int> host_count;  // hostname -> ranks seen so far
  for (RankInfo& r : ranks) {
    auto it = host_index.find(r.hostname);
    if (it == host_index.end()) {
      it = host_index.emplace(r.hostname, static_cast<int>(host_index.size())).first;
    }
    r.cross_rank = it->second;
    r.local_rank = host_count[r.hostname]++;
  }
  for (RankInfo& r : ranks) {
    r.local_size = host_count[r.hostname];
    r.cross_size = static_cast<int>(host_index.size());
  }
  return Topology{std::move(ranks)};
}

std::string DescribeDigestDifference(const std::string& coordinator, const std::string& worker,
                                     int rank) {
  const std::string who = "rank " + std::to_string(rank);
  auto mine = ParseDigest(coordinator);
  auto theirs = ParseDigest(worker);
  for (const auto& [key, value] : mine) {
    auto it = theirs.find(key);
    const std::string other = it == theirs.end() ? "<unset>" : "'" + it->second + "'";
    if (it == theirs.end() || it->second != value) {
      return "option " + key + " is " + other + " on " + who + " but '" + value +
             "' on the coordinator";
    }
  }
  for (const auto& [key, value] : theirs) {
    if (mine.count(key) == 0) {
      return "option " + key + " is '" + value + "' on " + who + " but <unset> on the coordinator";
    }
  }
  return "options digest '" + worker + "' on " + who + " but '" + coordinator +
         "' on the coordinator";
}

Status CoordinatorCore::ValidateJoin(const JoinRequest& r) const {
  if (r.size != config_.size) {
    return InvalidArgument("rank " + std::to_string(r.rank) + " says the job has size " +
                           std::to_string(r.size) + " but the coordinator has size " +
                           std::to_string(config_.size));
  }
  if (r.rank < 0 || r.rank >= config_.size) {
    return InvalidArgument("rank " + std::to_string(r.rank) + " is out of range [0, " +
                           std::to_string(config_.size) + ")");
  }
  if (r.protocol_version != kProtocolVersion) {
    return FailedPrecondition("protocol version differs: " + std::to_string(r.protocol_version) +
                              " on rank " + std::to_string(r.rank) + " but " +
                              std::to_string(kProtocolVersion) + " on the coordinator");
  }
  if (r.options_digest != config_.options_digest) {
    return FailedPrecondition("options differ: " + DescribeDigestDifference(config_.options_digest,
                                                                            r.options_digest,
                                                                            r.rank));
  }
  return Status::Ok();
}

std::string CoordinatorCore::DescribeRank(int rank) const {
  const RankState& r = ranks_[rank];
  return "rank " + std::to_string(rank) + " (host " + r.hostname + ", pid " +
         std::to_string(r.pid) + ")";
}

Status CoordinatorCore::Join(const JoinRequest& request, const std::string& peer,
                             TimePoint call_deadline, Topology* topology) {
  Status valid = ValidateJoin(request);
  if (!valid.ok()) {
    HORA_LOG_ERROR("coordinator: refused Join from {}: {}", peer, valid.message());
    return valid;
  }
  MutexLock lock(&mu_);
  const int rank = request.rank;
  RankState& state = ranks_[rank];
  if (aborted_) {
    if (state.joined && state.had_session && !state.session) {
      // The rank left the aborted job (shutdown) and starts again (init) before rank 0 has
      // replaced this coordinator: it should wait for the new one (Join retries until its
      // deadline), not fail with the old job's error.
      return Unavailable("the coordinator of the previous job, aborted (" + abort_message_ +
                         "), still runs: waiting for rank 0 to start a new one");
    }
    return Aborted(abort_message_);
  }
  if (shutting_down_) return Unavailable("the coordinator is shutting down");
  if (!start_failure_.empty()) return DeadlineExceeded(start_failure_);
  if (state.joined && state.had_session && !state.session && !state.lost) {
    // The rank said goodbye and is starting again (shutdown, then init), while this
    // coordinator still drains the old job: it should wait for the new coordinator.
    return Unavailable("the coordinator of the previous job is shutting down");
  }
  if (state.joined) {
    std::string msg = "rank " + std::to_string(rank) + " has already joined as " +
                      DescribeRank(rank) + "; refused host " + request.hostname + ", pid " +
                      std::to_string(request.pid);
    HORA_LOG_ERROR("coordinator: {}", msg);
    return Status(Code::kAlreadyExists, msg);
  }
  state.joined = true;
  state.hostname = request.hostname;
  state.pid = request.pid;
  if (++joined_count_ == config_.size) {
    std::vector<RankInfo> infos(config_.size);
    for (int i = 0; i < config_.size; ++i) {
      infos[i].rank = i;
      infos[i].hostname = ranks_[i].hostname;
      infos[i].pid = ranks_[i].pid;
    }
    topology_ = ComputeTopology(std::move(infos));
    topology_ready_ = true;
    topology_time_ = Clock::now();
    WakeTimerLocked(topology_time_ + config_.start_timeout);
    HORA_LOG_INFO("coordinator: all {} ranks joined", config_.size);
    join_cv_.NotifyAll();
  }
  return WaitForTopologyLocked(call_deadline, topology);
}

Status CoordinatorCore::WaitForTopologyLocked(TimePoint call_deadline, Topology* topology) {
  join_cv_.WaitUntil(&mu_, std::min(start_deadline_, call_deadline), [this] {
    mu_.AssertHeld();
    return topology_ready_ || !start_failure_.empty() || shutting_down_ || aborted_;
  });
  if (topology_ready_) {
    *topology = topology_;
    return Status::Ok();
  }
  if (aborted_) return Aborted(abort_message_);
  if (shutting_down_) return Unavailable("the coordinator is shutting down");
  if (start_failure_.empty() && Clock::now() >= start_deadline_) FailStartLocked();
  if (!start_failure_.empty()) return DeadlineExceeded(start_failure_);
  return DeadlineExceeded("the Join call's deadline passed");
}

void CoordinatorCore::FailStartLocked() {
  std::vector<int> missing;
  for (int i = 0; i < config_.size; ++i) {
    if (!ranks_[i].joined) missing.push_back(i);
  }
  start_failure_ = std::string(missing.size() == 1 ? "rank " : "ranks ") + JoinRanks(missing) +
                   " of " + std::to_string(config_.size) + " did not join within " +
                   FormatSeconds(config_.start_timeout);
  HORA_LOG_ERROR("coordinator: {}", start_failure_);
  join_cv_.NotifyAll();
}

}  // namespace hora
