// CoordinatorService: start, shutdown and small helpers. The handlers live in service_join.cc,
// store.cc and session.cc; the timer and sender threads in service_liveness.cc.
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "common/logging.h"
#include "common/mutex.h"
#include "common/thread_name.h"
#include "coordinator/grpc_process.h"
#include "coordinator/service_impl.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

Status ReadFile(const std::string& path, const char* what, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return InvalidArgument(std::string("cannot read the TLS ") + what + " '" + path + "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return Status::Ok();
}

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeCredentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  HORA_RETURN_IF_ERROR(ReadFile(tls.cert_file, "certificate", &pair.cert_chain));
  HORA_RETURN_IF_ERROR(ReadFile(tls.key_file, "key", &pair.private_key));
  options.pem_key_cert_pairs.push_back(pair);
  if (!tls.ca_file.empty()) {
    HORA_RETURN_IF_ERROR(ReadFile(tls.ca_file, "CA", &options.pem_root_certs));
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

Status ValidateConfig(const CoordinatorConfig& c) {
  if (c.size < 1) return InvalidArgument("coordinator: size must be at least 1");
  if (c.token.empty()) return InvalidArgument("coordinator: the job token must not be empty");
  if (c.listen_address.empty()) return InvalidArgument("coordinator: no listen address");
  if (c.heartbeat_interval <= milliseconds(0) || c.heartbeat_timeout <= milliseconds(0)) {
    return InvalidArgument("coordinator: heartbeat interval and timeout must be positive");
  }
  if (c.start_timeout <= milliseconds(0) || c.stall_warning <= milliseconds(0)) {
    return InvalidArgument("coordinator: start timeout and stall warning must be positive");
  }
  if (c.max_message_bytes < 1024) {
    return InvalidArgument("coordinator: max_message_bytes must be at least 1024");
  }
  return Status::Ok();
}

milliseconds StallCheckInterval(const CoordinatorConfig& c) {
  milliseconds interval = c.stall_warning / 2;
  if (c.stall_timeout > milliseconds(0)) interval = std::min(interval, c.stall_timeout / 4);
  return std::max(interval, milliseconds(10));
}

}  // namespace

StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::Start(
    const CoordinatorConfig& config) {
  HORA_RETURN_IF_ERROR(ValidateConfig(config));
  auto service = std::make_unique<CoordinatorServiceImpl>(config);
  HORA_RETURN_IF_ERROR(service->Init());
  return std::unique_ptr<CoordinatorService>(std::move(service));
}

CoordinatorServiceImpl::CoordinatorServiceImpl(const CoordinatorConfig& config)
    : config_(config),
      start_time_(Clock::now()),
      start_deadline_(start_time_ + config.start_timeout),
      stall_check_interval_(StallCheckInterval(config)),
      ranks_(config.size) {
  std::vector<int> everyone(config.size);
  for (int r = 0; r < config.size; ++r) everyone[r] = r;
  if (config_.autotune.enabled) tuner_ = std::make_unique<Autotuner>(config_.autotune);
  AddSetLocked(kGlobalProcessSet, std::move(everyone), "");
  next_heartbeat_ = start_time_ + config_.heartbeat_interval;
  next_stall_check_ = start_time_ + stall_check_interval_;
}

CoordinatorServiceImpl::~CoordinatorServiceImpl() {
  Shutdown("the coordinator was destroyed", milliseconds(0));
}

Status CoordinatorServiceImpl::Init() {
  PrepareGrpcProcess();
  StatusOr<std::shared_ptr<grpc::ServerCredentials>> creds = MakeCredentials(config_.tls);
  if (!creds.ok()) return creds.status();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config_.listen_address, creds.value(), &port_);
  builder.SetMaxReceiveMessageSize(config_.max_message_bytes);
  builder.SetMaxSendMessageSize(config_.max_message_bytes);
  builder.RegisterService(this);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    return Unavailable("coordinator: cannot listen on " + config_.listen_address);
  }
  HORA_LOG_INFO("coordinator: listening on {} (port {}) for {} ranks{}", config_.listen_address,
                port_, config_.size, config_.tls.enabled() ? " with TLS" : "");
  timer_thread_ = std::thread([this] {
    SetThreadName("hora-coord-time");
    TimerLoop();
  });
  sender_thread_ = std::thread([this] {
    SetThreadName("hora-coord-send");
    SenderLoop();
  });
  return Status::Ok();
}

void CoordinatorServiceImpl::Shutdown(const std::string& reason, milliseconds drain) {
  MutexLock shutdown_lock(&shutdown_mu_);
  if (shut_down_ || !server_) return;
  shut_down_ = true;
  {
    MutexLock lock(&mu_);
    // A diagnosis in progress (a rank was lost, and this rank is shutting down because of it)
    // gets the rest of its deadline, so that its report is written.
    if (diagnosis_) {
      sessions_cv_.WaitUntil(&mu_, diagnosis_->deadline, [this] {
        mu_.AssertHeld();
        return !diagnosis_.has_value();
      });
      FinishDiagnosisLocked();
    }
    // Drain: ranks still working (or still opening their session after a join that just
    // completed) may finish and say Goodbye; new sessions are still accepted meanwhile.
    sessions_cv_.WaitUntil(&mu_, Clock::now() + drain, [this] {
      mu_.AssertHeld();
      return DrainedLocked();
    });
    shutting_down_ = true;
    join_cv_.NotifyAll();
    if (!DrainedLocked()) AbortLocked(Code::kAborted, reason, -1);
    // Let the sender thread deliver the aborts before the calls are cancelled (bounded).
    sender_cv_.WaitUntil(&mu_, Clock::now() + milliseconds(500), [this] {
      mu_.AssertHeld();
      return flush_queue_.empty() && !sender_busy_;
    });
  }
  {
    MutexLock lock(&store_mu_);
    store_closed_ = true;
    store_cv_.NotifyAll();
  }
  // Calls still running after the deadline are cancelled; this returns when all handlers have.
  server_->Shutdown(std::chrono::system_clock::now() + milliseconds(200));
  {
    MutexLock lock(&mu_);
    stop_threads_ = true;
    timer_cv_.NotifyAll();
    sender_cv_.NotifyAll();
  }
  timer_thread_.join();
  sender_thread_.join();
  server_->Wait();
  HORA_LOG_INFO("coordinator: shut down ({})", reason);
}

bool CoordinatorServiceImpl::DrainedLocked() const {
  for (const RankState& r : ranks_) {
    if (r.session) return false;
    if (topology_ready_ && r.joined && !r.had_session && !r.lost && !aborted_) return false;
  }
  return true;
}

std::string FormatSeconds(milliseconds d) {
  char buf[32];
  if (d.count() % 1000 == 0) {
    std::snprintf(buf, sizeof(buf), "%lld s", static_cast<long long>(d.count() / 1000));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(d.count()) / 1000.0);
  }
  return buf;
}

std::string JoinRanks(const std::vector<int>& ranks, size_t cap) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < cap; ++i) {
    if (i > 0) s += ",";
    s += std::to_string(ranks[i]);
  }
  if (ranks.size() > cap) s += ",... (" + std::to_string(ranks.size() - cap) + " more)";
  return s;
}

}  // namespace hora
