// Process sets on the worker: the collective add and remove, and the queries.
//
// AddProcessSet sends this rank's n-th ProcessSetOp and waits for the coordinator's answer
// (coordinator/service_sets.cc compares the n-th requests of all ranks). A request this rank
// cannot make (bad ranks, an unknown backend) is still sent, marked refused with the reason,
// so that every rank gets the same clear error at once instead of the others waiting out the
// start timeout. Members then build the set's communicator through the registry (collective
// among the members, bounded by the collective timeout) and start its executor.
#include <algorithm>

#include "collectives/mailbox.h"
#include "collectives/registry.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "runtime/engine.h"
#include "runtime/engine_config.h"
#include "runtime/sigpipe.h"
#include "runtime/steady_net_board.h"
#include "runtime/steady_shm_board.h"

namespace hora {
namespace {

std::string RanksText(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? "," : "") + std::to_string(ranks[i]);
  return s + "]";
}

}  // namespace

std::shared_ptr<ProcessSetRuntime> Engine::FindSet(int32_t id) const {
  MutexLock lock(&sets_mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second;
}

BackendConfig Engine::BackendConfigFor(int32_t id, const std::vector<int>& ranks,
                                       int set_rank) const {
  BackendConfig c;
  c.process_set = id;
  c.rank = set_rank;
  c.global_ranks = ranks;
  for (int r : ranks) c.hostnames.push_back(topology_.ranks[r].hostname);
  c.device = Device::kCpu;
  c.store = client_.get();
  c.key_prefix = "set/" + std::to_string(id) + "/cpu/";
  c.bind_address = options_.gloo_iface;
  c.coordinator_host = coordinator_host_;
  c.timeout = CollectiveTimeout(options_);
  c.max_message_bytes = options_.max_message_bytes;
  c.deterministic = options_.deterministic;
  if (auto environment = options_.environment) {
    c.env = [environment](const char* name) -> const char* {
      auto it = environment->find(name);
      return it == environment->end() ? nullptr : it->second.c_str();
    };
  }
  return c;
}

Status Engine::OpenPeerTransfers(const std::vector<int>& everyone) {
  PeerTransfers::Hooks hooks;
  // A transfer that fails once the job has failed reports the job's cause (a peer that
  // exited after its own error is not the culprit).
  hooks.complete = [this](int64_t handle, Status s) {
    if (!s.ok()) {
      Status job = JobError();
      if (!job.ok()) s = std::move(job);
    }
    handles_.Complete(handle, std::move(s));
  };
  hooks.timeline = &timeline_;
  std::unique_ptr<PeerChannel> channel;
  if (options_.size > 1) {
    BackendConfig c = BackendConfigFor(kGlobalProcessSet, everyone, options_.rank);
    c.key_prefix = "p2p/";
    PeerChannel::Options o;
    o.stall = std::chrono::milliseconds(static_cast<int64_t>(options_.stall_timeout_s * 1000));
    o.on_stall = [this](const Status& s) {
      (void)FailJob(Status(s.code(), s.message() + " (" + kEnvStallTimeout + ")"));
    };
    // A peer that died is named by the coordinator too (its session broke) within
    // milliseconds; a survivor that exits after its own error is not the culprit.
    o.lost_grace = std::chrono::milliseconds(1000);
    o.on_lost = [this](const Status& s) { (void)FailJob(s); };
    o.name = [this](int rank) {
      const RankInfo& r = topology_.ranks[static_cast<size_t>(rank)];
      return "rank " + std::to_string(rank) + " (host " + r.hostname + ", pid " +
             std::to_string(r.pid) + ")";
    };
    auto opened = PeerChannel::Open(c, std::move(o));
    if (!opened.ok()) {
      return Status(opened.status().code(), "send/recv: " + opened.status().message());
    }
    channel = std::move(opened).value();
  }
  peers_ = std::make_unique<PeerTransfers>(std::move(channel), std::move(hooks));
  return Status::Ok();
}

StatusOr<std::unique_ptr<Communicator>> Engine::CreateDeviceCommunicator(
    int32_t set, const std::vector<int>& ranks, int set_rank, Device device, int index,
    int ordinal) {
  BackendConfig c = BackendConfigFor(set, ranks, set_rank);
  c.device = device;
  c.device_index = index;
  // The same on every member: each rank's device index may differ (one GPU per local rank).
  c.key_prefix = "set/" + std::to_string(set) + "/cuda/" + std::to_string(ordinal) + "/";
  auto comm = CreateCommunicator(options_.gpu_operations, kEnvGpuOperations, c);
  if (!comm.ok()) {
    return Status(comm.status().code(), "process set " + std::to_string(set) +
                                            ": the communicator for CUDA device " +
                                            std::to_string(index) + ": " + comm.status().message());
  }
  return comm;
}

StatusOr<SteadyPath::Parts> Engine::SteadyParts(int32_t id, const std::vector<int>& ranks,
                                                int set_rank, Communicator* comm) const {
  if (options_.steady == "off") return SteadyPath::Parts();
  // The autotuner scores what the coordinator plans; operations it never sees would leave
  // it without samples (it would never finish).
  if (options_.autotune) {
    if (options_.steady != "on") return SteadyPath::Parts();
    return FailedPrecondition(std::string(kEnvSteady) +
                              "=on cannot be combined with "
                              "HORA_AUTOTUNE (the autotuner measures what the coordinator "
                              "plans); use HORA_STEADY=auto, which is off while autotuning");
  }
  BackendConfig config = BackendConfigFor(id, ranks, set_rank);
  config.key_prefix = "set/" + std::to_string(id) + "/steady/";
  SteadyPath::Parts parts;
  if (!BackendOffersSharedBoard(comm->name()) || comm->size() > ShmSteadyBoard::kMaxMembers) {
    // Members on several hosts (or a backend without shared memory): they agree by messages.
    const std::string refusal = NetSteadyBoard::Refusal(comm->size(), config.hostnames);
    if (!refusal.empty()) {
      if (options_.steady != "on") return SteadyPath::Parts();
      return FailedPrecondition(std::string(kEnvSteady) + "=on: process set " + std::to_string(id) +
                                ": the steady path across hosts takes " + refusal + "; use auto");
    }
    auto box =
        CreateMailbox(config, SteadyRoutes(set_rank, config.hostnames, comm->size()).peers());
    if (!box.ok()) {
      return Status(box.status().code(),
                    "process set " + std::to_string(id) +
                        ": the steady path's mailbox: " + box.status().message());
    }
    // Instances larger than the board's Eager size exchange their data on a second
    // communicator of the set's backend, where the backend can run two at once.
    if (BackendRunsConcurrently(comm->name(), config)) {
      auto steady = CreateCommunicator(comm->name(), kEnvSteady, config);
      if (!steady.ok()) return steady.status();
      parts.comm = std::move(steady).value();
    }
    parts.board = std::make_unique<NetSteadyBoard>(std::move(box).value(), parts.comm != nullptr,
                                                   config.hostnames);
    return parts;
  }
  // The same backend again, under its own key prefix: a second communicator that only the
  // steady path drives, so that the coordinator's order on the first one is untouched.
  // Both members of a fast instance are woken by the same append, so its collective rarely
  // waits long; a long spin there (shm's automatic one grows to 250 us) only took the core
  // from the peer on 2 loaded cores: 1 us gave a 20 us median where automatic gave 20-270 us
  // (docs/benchmarks-steady.md). After the spin a wait yields its core for up to 50 us before
  // the futex: the peer is usually a few microseconds behind (its helper saw the same
  // append), and yielding, unlike spinning, leaves the core to whoever needs it.
  config.spin_us = 1;
  config.yield_us = 50;
  // Only this communicator carries the board (the first one's segment stays as small as
  // it was without the steady path).
  config.shared_board_bytes = ShmSteadyBoard::BytesNeeded(comm->size());
  auto steady = CreateCommunicator(comm->name(), kEnvSteady, config);
  if (!steady.ok()) return steady.status();
  size_t bytes = 0;
  void* memory = steady.value()->SharedBoard(&bytes);
  if (memory == nullptr || bytes < config.shared_board_bytes) {
    return Internal("process set " + std::to_string(id) + ": the steady communicator (" +
                    comm->name() + ") offers a board of " + std::to_string(bytes) +
                    " bytes; the steady path needs " + std::to_string(config.shared_board_bytes));
  }
  parts.board =
      std::make_unique<ShmSteadyBoard>(memory, steady.value()->rank(), steady.value()->size());
  parts.comm = std::move(steady).value();
  return parts;
}

StatusOr<SteadyStats> Engine::Steady(int32_t process_set) const {
  std::shared_ptr<ProcessSetRuntime> set = FindSet(process_set);
  if (!set)
    return Status(Code::kNotFound,
                  "process set " + std::to_string(process_set) + " does not exist");
  if (SteadyPath* steady = set->steady()) return steady->Stats();
  return SteadyStats();
}

Status Engine::InstallSet(int32_t id, std::vector<int> ranks, const std::string& cpu_operations) {
  ProcessSetRuntime::Host* host = this;
  auto set = std::make_shared<ProcessSetRuntime>(id, ranks, options_.rank, host, completion_.get(),
                                                 &timeline_);
  if (set->included()) {
    const bool own = !cpu_operations.empty();
    auto comm = CreateCommunicator(own ? cpu_operations : options_.cpu_operations,
                                   own ? "the process set's cpu_operations" : kEnvCpuOperations,
                                   BackendConfigFor(id, ranks, set->rank()));
    if (!comm.ok()) return comm.status();
    auto steady = SteadyParts(id, ranks, set->rank(), comm.value().get());
    if (!steady.ok()) return steady.status();
    // A member's side of a connection can be done before its peer's: a barrier on the last
    // communicator made holds each member until all are connected, so one that shuts down
    // right after starting does not close a connection that a peer is still making.
    Communicator* last = steady.value().comm ? steady.value().comm.get() : comm.value().get();
    if (Status s = last->Barrier(); !s.ok()) {
      return Status(s.code(), "process set " + std::to_string(id) +
                                  ": waiting for every member to connect: " + s.message());
    }
    SteadyOptions steady_options;
    steady_options.patience = std::chrono::milliseconds(options_.steady_patience_ms);
    steady_options.stall_warning =
        std::chrono::milliseconds(static_cast<int64_t>(options_.stall_warning_s * 1000));
    steady_options.stall_timeout =
        std::chrono::milliseconds(static_cast<int64_t>(options_.stall_timeout_s * 1000));
    steady_options.fusion_bytes = options_.fusion_threshold_bytes;
    set->Start(std::move(comm).value(), std::move(steady).value(), steady_options);
  }
  MutexLock lock(&sets_mu_);
  sets_[id] = std::move(set);
  return Status::Ok();
}

void Engine::OnProcessSetResult(ProcessSetResult result) {
  {
    MutexLock lock(&mu_);
    set_results_[result.seq] = std::move(result);
  }
  cv_.NotifyAll();
}

StatusOr<ProcessSetResult> Engine::RunSetOp(ProcessSetOp op, const std::string& refused) {
  op.seq = next_set_op_++;
  op.refused = refused;
  {
    MutexLock lock(&mu_);
    if (!error_.ok()) return error_;
    if (stop_) return Aborted("Hora is shutting down");
  }
  AnnounceFresh();  // what is held goes before the request
  client_->SendProcessSetOp(op);
  // The coordinator answers within the start timeout (it fails requests that not every rank
  // made by then); the margin covers a lost coordinator, which the heartbeat timeout detects.
  const auto bound = std::chrono::milliseconds(
      static_cast<int64_t>((options_.start_timeout_s + 2 * options_.heartbeat_timeout_s) * 1000));
  MutexLock lock(&mu_);
  cv_.WaitFor(&mu_, bound, [&] {
    mu_.AssertHeld();
    return set_results_.count(op.seq) != 0 || !error_.ok() || stop_;
  });
  auto it = set_results_.find(op.seq);
  if (it != set_results_.end()) {
    ProcessSetResult r = std::move(it->second);
    set_results_.erase(it);
    if (!r.status.ok()) return r.status;
    return r;
  }
  if (!error_.ok()) return error_;
  if (stop_) return Aborted("Hora is shutting down");
  return DeadlineExceeded("the coordinator did not answer process set operation #" +
                          std::to_string(op.seq));
}

StatusOr<int32_t> Engine::AddProcessSet(std::vector<int> ranks, const std::string& cpu_operations) {
  MutexLock serial(&set_op_mu_);
  std::sort(ranks.begin(), ranks.end());
  std::string refused;
  if (ranks.empty()) {
    refused = "a process set needs at least one rank";
  } else if (ranks.front() < 0 || ranks.back() >= options_.size) {
    refused = "process set ranks " + RanksText(ranks) + " must be in [0, " +
              std::to_string(options_.size) + ")";
  } else if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end()) {
    refused = "process set ranks " + RanksText(ranks) + " contain a rank twice";
  } else if (!cpu_operations.empty()) {
    Status s = CheckSelection(cpu_operations, Device::kCpu, "cpu_operations");
    if (!s.ok()) refused = s.message();
  }
  ProcessSetOp op;
  op.ranks.assign(ranks.begin(), ranks.end());
  op.cpu_operations = cpu_operations;
  auto result = RunSetOp(std::move(op), refused);
  if (!result.ok()) return result.status();
  const int32_t id = result.value().process_set;
  ScopedBlockSigpipe block_sigpipe;  // for the threads the set starts (runtime/sigpipe.h)
  Status s = InstallSet(id, std::move(ranks), cpu_operations);
  if (!s.ok()) {
    // The set exists at the coordinator but this member cannot run it: its peers would wait
    // on it, so the job is broken.
    Status broken(s.code(), "process set " + std::to_string(id) + ": " + s.message());
    client_->SendFailure(broken.message());
    SetError(broken);
    return broken;
  }
  return id;
}

Status Engine::RemoveProcessSet(int32_t id) {
  MutexLock serial(&set_op_mu_);
  std::string refused;
  if (id == kGlobalProcessSet) {
    refused = "the global process set (0) cannot be removed";
  } else if (!FindSet(id)) {
    refused = "process set " + std::to_string(id) + " does not exist on rank " +
              std::to_string(options_.rank);
  }
  ProcessSetOp op;
  op.remove = true;
  op.process_set = id;
  auto result = RunSetOp(std::move(op), refused);
  if (!result.ok()) return result.status();
  std::shared_ptr<ProcessSetRuntime> set;
  {
    MutexLock lock(&sets_mu_);
    auto it = sets_.find(id);
    if (it != sets_.end()) {
      set = std::move(it->second);
      sets_.erase(it);
    }
  }
  const Status removed =
      Aborted("process set " + std::to_string(id) + " was removed while the operation was pending");
  if (set) {
    // Buckets planned before the removal run on every member: let them finish, so that no
    // member is left waiting on this one.
    // Abort only what is stuck: a backend may record an abort for every member (shm does),
    // and a member still finishing the last bucket would fail with it.
    if (!set->Drain(CollectiveTimeout(options_))) {
      HORA_LOG_WARN("process set {}: buckets still running when it was removed", id);
      set->Abort(removed);
    }
    set->Stop();
  }
  for (Request& r : queue_.TakeSet(id)) handles_.Complete(r.handle, removed);
  int64_t join = 0;
  {
    MutexLock lock(&mu_);
    auto it = join_handles_.find(id);
    if (it != join_handles_.end()) {
      join = it->second;
      join_handles_.erase(it);
    }
  }
  if (join != 0) handles_.Complete(join, removed);
  return Status::Ok();
}

StatusOr<ProcessSetInfo> Engine::ProcessSet(int32_t id) const {
  std::shared_ptr<ProcessSetRuntime> set = FindSet(id);
  if (!set) {
    return Status(Code::kNotFound, "process set " + std::to_string(id) +
                                       " does not exist (never added, or removed)");
  }
  ProcessSetInfo info;
  info.id = id;
  info.ranks = set->ranks();
  info.rank = set->rank();
  info.cpu_backend = set->backend();
  return info;
}

std::vector<int32_t> Engine::ProcessSetIds() const {
  MutexLock lock(&sets_mu_);
  std::vector<int32_t> ids;
  for (const auto& [id, set] : sets_) ids.push_back(id);
  return ids;
}

}  // namespace hora
