#include "runtime/engine.h"

#include <unistd.h>

#include <chrono>

#include "collectives/registry.h"
#include "common/fd_limit.h"
#include "common/logging.h"
#include "common/mutex.h"
#include "common/thread_name.h"
#include "runtime/engine_config.h"
#include "runtime/sigpipe.h"

namespace hora {

Engine::Engine(const Options& options)
    : options_(options),
      recorder_(static_cast<size_t>(options.flight_recorder_size)),
      handles_(&recorder_) {
  tuning_.fusion_threshold_bytes = options.fusion_threshold_bytes;
  tuning_.cycle_time_us = static_cast<int64_t>(options.cycle_time_ms * 1000);
  tuning_.done = !options.autotune;
}

StatusOr<std::unique_ptr<Engine>> Engine::Start(const Options& options) {
  std::unique_ptr<Engine> engine(new Engine(options));
  ScopedBlockSigpipe block_sigpipe;  // for the threads Init starts
  Status s = engine->Init();
  if (!s.ok()) {
    (void)engine->Shutdown();  // cleanup after the failure that s reports (Shutdown logs its own)
    return s;
  }
  return engine;
}

Status Engine::Init() {
  spdlog::level::level_enum level;
  if (ParseLogLevel(options_.log_level, &level)) SetLogLevel(level);
  SetLogRank(options_.rank);
  HORA_LOG_INFO("starting: {}; backends built: {}", options_.Describe(), BuiltBackendsString());
  for (const std::string& note : options_.env_notes) HORA_LOG_INFO("{}", note);
  for (const std::string& warning : options_.env_warnings) HORA_LOG_WARN("{}", warning);
  const std::string files = RaiseOpenFileLimit(OpenFilesWanted(options_.size));
  if (!files.empty()) HORA_LOG_WARN("{}", files);
  auto address_or = StartCoordinator();
  if (!address_or.ok()) return address_or.status();
  const std::string address = std::move(address_or).value();
  coordinator_host_ = HostOf(address);
  ClientConfig cl = ClientConfigFrom(options_, address);
  if (service_) cl.local_host = service_->local_host();  // rank 0: session by function calls
  auto client = CoordinatorClient::Connect(cl);
  if (!client.ok()) return client.status();
  client_ = std::move(client).value();
  topology_ = client_->topology();
  const std::string differs = CompareWithTopology(
      options_.launch, self().local_rank, self().local_size, self().cross_rank, self().cross_size);
  if (!differs.empty()) HORA_LOG_WARN("{}", differs);
  completion_ = std::make_unique<CompletionQueue>();

  std::vector<int> everyone(options_.size);
  for (int r = 0; r < options_.size; ++r) everyone[r] = r;
  HORA_RETURN_IF_ERROR(OpenPeerTransfers(everyone));  // published before the set's collective
  HORA_RETURN_IF_ERROR(InstallSet(kGlobalProcessSet, std::move(everyone), ""));

  SessionCallbacks callbacks;
  callbacks.on_plan = [this](PlanMessage plan) { OnPlan(std::move(plan)); };
  callbacks.on_join_done = [this](int32_t set, int last_rank) {
    {
      MutexLock lock(&mu_);
      join_done_.emplace_back(set, last_rank);
    }
    cv_.NotifyAll();
  };
  callbacks.on_process_set = [this](ProcessSetResult r) { OnProcessSetResult(std::move(r)); };
  callbacks.on_tuning = [this](TuningNotice t) {
    MutexLock lock(&mu_);
    tuning_ = t;
  };
  callbacks.on_abort = [this](Status status) { SetError(std::move(status)); };
  responder_ = std::make_unique<DiagnosisResponder>(
      &recorder_, [this](const DiagnosisReport& r) { client_->SendDiagnosis(r); });
  callbacks.on_diagnose = [this](DiagnosisRequest r) { responder_->Request(std::move(r)); };
  HORA_RETURN_IF_ERROR(client_->StartSession(std::move(callbacks)));
  if (options_.diagnose_s > 0) {
    signal_ = std::make_unique<DiagnoseSignal>(
        options_.diagnose_signal, [this](const std::string& why) { DiagnoseNow(why); });
  }
  thread_ = std::thread([this] {
    SetThreadName("hora-control");
    BackgroundLoop();
  });
  if (!options_.timeline.empty()) {
    Status s = StartTimeline(options_.timeline, options_.timeline_mark_cycles);
    if (!s.ok()) return Status(s.code(), std::string(kEnvTimeline) + ": " + s.message());
  }
  HORA_LOG_INFO("ready: local rank {}/{}, cross rank {}/{}, cpu operations {}", self().local_rank,
                self().local_size, self().cross_rank, self().cross_size,
                FindSet(kGlobalProcessSet)->backend());
  return Status::Ok();
}

// Rank 0 starts the coordinator on CoordinatorListenAddress. Everyone then knows where to
// connect: the configured address (rank 0: its host with the port it got), or, with an
// exchange, what rank 0 published (rank 0: its listen address with the port it got).
StatusOr<std::string> Engine::StartCoordinator() {
  std::string address = options_.coordinator_address;
  if (!options_.coordinator_exchange.empty()) {
    auto exchange = OpenAddressExchange(options_.coordinator_exchange);
    if (!exchange.ok()) return exchange.status();
    exchange_ = std::move(exchange).value();
    if (exchange_->rank() != options_.rank) {
      return InvalidArgument(options_.coordinator_exchange + " says this process is rank " +
                             std::to_string(exchange_->rank()) + " but Hora's rank is " +
                             std::to_string(options_.rank) + ": set " + kEnvCoordinatorAddr);
    }
  }
  if (options_.rank == 0) {
    auto listen = CoordinatorListenAddress(options_);
    if (!listen.ok()) return listen.status();
    CoordinatorConfig cc = CoordinatorConfigFrom(options_);
    cc.listen_address = listen.value();
    cc.on_diagnosis = [this](const std::string& summary, const std::string& report) {
      if (timeline_.on()) timeline_.Diagnosis(TimelineNowUs(), summary, report);
    };
    auto service = CoordinatorService::Start(cc);
    if (!service.ok()) return service.status();
    service_ = std::move(service).value();
    address = JoinHostPort(HostOf(exchange_ ? listen.value() : address), service_->port());
  }
  if (exchange_) {
    const auto timeout =
        std::chrono::milliseconds(static_cast<int64_t>(options_.start_timeout_s * 1000));
    auto published = exchange_->Exchange(options_.rank == 0 ? address : "", timeout);
    if (!published.ok()) return published.status();
    address = published.value();
    HORA_LOG_INFO("coordinator address {} through {}", address, options_.coordinator_exchange);
  }
  return address;
}

Engine::~Engine() { (void)Shutdown(); }  // a destructor reports nothing; Shutdown logs

Status Engine::Shutdown() {
  signal_.reset();
  {
    MutexLock lock(&mu_);
    stop_ = true;
    halted_.store(true, std::memory_order_release);
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
  std::map<int32_t, std::shared_ptr<ProcessSetRuntime>> sets;
  {
    MutexLock lock(&sets_mu_);
    sets.swap(sets_);
  }
  const Status aborted = ShutDownStatus();
  // A healthy job's communicators are not aborted: a backend may record an abort for every
  // member (shm does), and a peer still finishing the last collective would fail with it.
  const bool broken = !AsyncError().ok();
  for (auto& [id, set] : sets) {
    if (broken) set->Abort(aborted);
    set->Stop();
  }
  sets.clear();
  if (completion_) completion_->Stop();
  if (peers_) peers_->Abort(aborted);
  FailEverything(aborted);
  Status timeline = timeline_.Stop();
  if (!timeline.ok()) HORA_LOG_WARN("{}", timeline.message());
  if (client_) client_->Close();
  if (responder_) responder_->Stop();  // its reports go through client_
  if (service_) {
    service_->Shutdown(
        "rank 0 shut down",
        std::chrono::milliseconds(static_cast<int64_t>(options_.heartbeat_timeout_s * 1000)));
  }
  return Status::Ok();
}

TuningNotice Engine::Tuning() const {
  MutexLock lock(&mu_);
  return tuning_;
}

Status Engine::AsyncError() const {
  MutexLock lock(&mu_);
  return error_;
}

void Engine::SetError(Status status) {
  {
    MutexLock lock(&mu_);
    if (!error_.ok()) return;
    error_ = std::move(status);
    halted_.store(true, std::memory_order_release);
    HORA_LOG_ERROR("job failed: {}", error_.message());
  }
  cv_.NotifyAll();
}

Status Engine::ShutDownStatus() {
  return Aborted("Hora was shut down while the operation was pending");
}

void Engine::FailEverything(const Status& status) {
  for (Request& r : queue_.TakeAll()) handles_.Complete(r.handle, status);
  std::map<int32_t, int64_t> joins;
  {
    MutexLock lock(&mu_);
    joins.swap(join_handles_);
  }
  for (const auto& [set, handle] : joins) handles_.Complete(handle, status);
}

Status Engine::StartTimeline(const std::string& path, bool mark_cycles) {
  if (timeline_.on()) {
    return Status(Code::kFailedPrecondition,
                  "the timeline is already being written to '" + timeline_.path() + "'");
  }
  // This rank's plans carry the arrivals from the coordinator's reading of this on: sent
  // before the clock's round trips (milliseconds), so it is read by the time records start.
  client_->SendTimings(true);
  StatusOr<int64_t> offset = client_->ClockOffsetUs();
  Status started = offset.status();
  const std::string file = TimelineRankPath(path, options_.rank);
  if (offset.ok()) {
    started = timeline_.Start(
        file, options_.rank, "rank " + std::to_string(options_.rank) + " (" + self().hostname + ")",
        offset.value(), mark_cycles);
  }
  if (!started.ok()) {
    client_->SendTimings(false);
    return started;
  }
  HORA_LOG_INFO("timeline: writing {}", file);
  return Status::Ok();
}

Status Engine::StopTimeline() {
  Status stopped = timeline_.Stop();
  client_->SendTimings(false);
  return stopped;
}

std::optional<Request> Engine::TakeRequest(int32_t id) {
  // The queue's lock under announce_mu_, as AnnounceFresh takes them: the key is not copied.
  MutexLock lock(&announce_mu_);
  auto it = id_keys_.find(static_cast<uint32_t>(id));
  if (it == id_keys_.end()) return std::nullopt;
  std::optional<Request> r = queue_.Take(it->second);
  if (!r) return r;
  recorder_.Started(r->handle, TimelineNowUs());
  if (IsOneShotName(it->second.name)) {  // planned once: forgotten (common/types.h)
    ids_.erase(it->second);
    id_specs_.erase(it->first);
    id_keys_.erase(it);
  }
  return r;
}

Engine::KnownNames Engine::Known() const {
  KnownNames known;
  {
    MutexLock lock(&announce_mu_);
    known.rank = ids_.size();
  }
  if (service_) known.coordinator = service_->KnownNames();
  return known;
}

void Engine::Complete(int64_t handle, Status status, OpResult result) {
  handles_.Complete(handle, std::move(status), std::move(result));
}

// A failed collective breaks the job. The coordinator usually knows why (a rank died): wait
// briefly for its verdict so the error names the culprit, else report ours.
Status Engine::BucketFailed(const Status& status) {
  MutexLock lock(&mu_);
  cv_.WaitFor(&mu_, std::chrono::seconds(3), [&] {
    mu_.AssertHeld();
    return !error_.ok() || stop_;
  });
  if (!error_.ok()) return error_;
  lock.Unlock();
  return FailJob(status);
}

Status Engine::FailJob(const Status& status) {
  Status job = JobError();
  if (!job.ok()) return job;
  client_->SendFailure(status.message());
  SetError(status);
  return status;
}

}  // namespace hora
