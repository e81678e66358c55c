#include "runtime/engine.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include "collectives/gloo/gloo_communicator.h"
#include "common/logging.h"

namespace hora {
namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

milliseconds Ms(double seconds) { return milliseconds(static_cast<int64_t>(seconds * 1000)); }

// The local IP address a packet to `host` would leave from (no packet is sent).
std::string LocalAddressToward(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), "9", &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    char buf[INET_ADDRSTRLEN] = {0};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf)) != nullptr) {
      out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  return out;
}

std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return host;
}

// Blocks SIGPIPE in the calling thread for its lifetime, so that every thread started
// meanwhile (Gloo's, gRPC's, the background thread) inherits the block: a write to a socket
// whose peer died then fails with EPIPE (Gloo reports it) instead of killing the process,
// which is SIGPIPE's default. The caller's own mask is restored; the process-wide
// disposition is left alone.
class ScopedBlockSigpipe {
 public:
  ScopedBlockSigpipe() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~ScopedBlockSigpipe() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};

}  // namespace

Engine::Engine(const Options& options) : options_(options) {}

StatusOr<std::unique_ptr<Engine>> Engine::Start(const Options& options) {
  std::unique_ptr<Engine> engine(new Engine(options));
  ScopedBlockSigpipe block_sigpipe;  // for the threads Init starts
  Status s = engine->Init();
  if (!s.ok()) {
    engine->Shutdown();
    return s;
  }
  return engine;
}

Status Engine::Init() {
  spdlog::level::level_enum level;
  if (ParseLogLevel(options_.log_level, &level)) SetLogLevel(level);
  SetLogRank(options_.rank);
  HORA_LOG_INFO("starting: {}", options_.Describe());
  TlsFiles tls{options_.tls_cert, options_.tls_key, options_.tls_ca};
  std::string address = options_.coordinator_address;
  if (options_.rank == 0) {
    CoordinatorConfig cc;
    cc.listen_address = address;
    cc.size = options_.size;
    cc.token = options_.token;
    cc.options_digest = options_.Digest();
    cc.planner.size = options_.size;
    cc.planner.fusion_threshold_bytes = options_.fusion_threshold_bytes;
    cc.planner.cycle_time = std::chrono::microseconds(static_cast<int64_t>(options_.cycle_time_ms * 1000));
    cc.start_timeout = Ms(options_.start_timeout_s);
    cc.heartbeat_interval = Ms(options_.heartbeat_interval_s);
    cc.heartbeat_timeout = Ms(options_.heartbeat_timeout_s);
    cc.stall_warning = Ms(options_.stall_warning_s);
    cc.stall_timeout = Ms(options_.stall_timeout_s);
    cc.max_message_bytes = static_cast<int>(options_.max_message_bytes);
    cc.tls = tls;
    auto service = CoordinatorService::Start(cc);
    if (!service.ok()) return service.status();
    service_ = std::move(service).value();
    address = HostOf(address) + ":" + std::to_string(service_->port());
  }
  ClientConfig cl;
  cl.address = address;
  cl.token = options_.token;
  cl.rank = options_.rank;
  cl.size = options_.size;
  cl.hostname = options_.hostname;
  cl.pid = getpid();
  cl.options_digest = options_.Digest();
  cl.start_timeout = Ms(options_.start_timeout_s);
  cl.heartbeat_interval = Ms(options_.heartbeat_interval_s);
  cl.heartbeat_timeout = Ms(options_.heartbeat_timeout_s);
  cl.max_message_bytes = static_cast<int>(options_.max_message_bytes);
  cl.tls = tls;
  if (service_) cl.local_host = service_->local_host();  // rank 0: session by function calls
  auto client = CoordinatorClient::Connect(cl);
  if (!client.ok()) return client.status();
  client_ = std::move(client).value();
  topology_ = client_->topology();

  GlooConfig gc;
  gc.rank = options_.rank;
  gc.size = options_.size;
  gc.store = client_.get();
  gc.key_prefix = "gloo/";
  gc.timeout = Ms(options_.collective_timeout_s);
  gc.bind_address = options_.gloo_iface;
  if (gc.bind_address.empty()) {
    gc.bind_address = topology_.ranks[0].cross_size == 1 ? "127.0.0.1" : LocalAddressToward(HostOf(address));
  }
  if (gc.bind_address.empty()) {
    return Unavailable("cannot find a local address toward the coordinator " + address +
                       "; set HORA_GLOO_IFACE to this host's address");
  }
  auto comm = CreateGlooCommunicator(gc);
  if (!comm.ok()) return comm.status();
  comm_ = std::move(comm).value();
  executor_ = std::make_unique<BucketExecutor>(comm_.get());

  SessionCallbacks callbacks;
  callbacks.on_plan = [this](PlanMessage plan) { OnPlan(std::move(plan)); };
  callbacks.on_join_done = [this](int last_rank) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      join_done_.push_back(last_rank);
    }
    cv_.notify_one();
  };
  callbacks.on_abort = [this](Status status) { SetError(std::move(status)); };
  HORA_RETURN_IF_ERROR(client_->StartSession(std::move(callbacks)));
  thread_ = std::thread([this] { BackgroundLoop(); });
  HORA_LOG_INFO("ready: local rank {}/{}, cross rank {}/{}, data plane {}", self().local_rank,
                self().local_size, self().cross_rank, self().cross_size, comm_->name());
  return Status::Ok();
}

Engine::~Engine() { Shutdown(); }

Status Engine::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  FailEverything(Aborted("Hora was shut down while the operation was pending"));
  if (client_) client_->Close();
  if (service_) {
    service_->Shutdown("rank 0 shut down", Ms(options_.heartbeat_timeout_s));
  }
  return Status::Ok();
}

Status Engine::AsyncError() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

void Engine::SetError(Status status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return;
    error_ = std::move(status);
    HORA_LOG_ERROR("job failed: {}", error_.message());
  }
  cv_.notify_all();
}

void Engine::FailEverything(const Status& status) {
  for (Request& r : queue_.TakeAll()) handles_.Complete(r.handle, status);
  int64_t join = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::swap(join, join_handle_);
  }
  if (join != 0) handles_.Complete(join, status);
}

StatusOr<int64_t> Engine::Enqueue(TensorSpec spec, const void* input, void* output) {
  HORA_RETURN_IF_ERROR(ValidateSpec(spec, input, output));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    if (stop_) return Aborted("Hora is shutting down");
  }
  Request r;
  r.spec = std::move(spec);
  r.input = input;
  r.output = output;
  r.handle = handles_.Create();
  int64_t handle = r.handle;
  Status s = queue_.Push(std::move(r));
  if (!s.ok()) {
    handles_.Release(handle);
    return s;
  }
  AnnounceFresh();
  return handle;
}

StatusOr<int64_t> Engine::EnqueueBarrier() {
  TensorSpec spec;
  {
    std::lock_guard<std::mutex> lock(mu_);
    spec.name = "hora.barrier." + std::to_string(barrier_count_++);
  }
  spec.collective = CollectiveType::kBarrier;
  spec.dtype = DataType::kUint8;
  return Enqueue(std::move(spec), nullptr, nullptr);
}

StatusOr<int64_t> Engine::EnqueueJoin() {
  int64_t handle = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_.ok()) return error_;
    if (stop_) return Aborted("Hora is shutting down");
    if (join_handle_ != 0) return Status(Code::kAlreadyExists, "this rank has already joined");
    handle = join_handle_ = handles_.Create();
  }
  client_->SendJoin();
  return handle;
}

}  // namespace hora
