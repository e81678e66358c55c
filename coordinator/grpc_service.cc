// The gRPC adapter: start, shutdown, and the unary calls and session streams, each converted
// at the edge and handed to the core.
#include "coordinator/grpc_service.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <deque>

#include "common/logging.h"
#include "coordinator/auth.h"
#include "coordinator/convert.h"
#include "coordinator/grpc_process.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeCredentials(const TlsFiles& tls) {
  if (!tls.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  HORA_RETURN_IF_ERROR(ReadTlsFile(tls.cert_file, "certificate", &pair.cert_chain));
  HORA_RETURN_IF_ERROR(ReadTlsFile(tls.key_file, "key", &pair.private_key));
  options.pem_key_cert_pairs.push_back(pair);
  if (!tls.ca_file.empty()) {
    HORA_RETURN_IF_ERROR(ReadTlsFile(tls.ca_file, "CA", &options.pem_root_certs));
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

// The call's deadline on the core's clock (TimePoint::max() when the client set none).
TimePoint CallDeadline(const grpc::ServerContext& ctx) {
  const auto deadline = ctx.deadline();
  if (deadline == std::chrono::system_clock::time_point::max()) return TimePoint::max();
  return Clock::now() + (deadline - std::chrono::system_clock::now());
}

}  // namespace

StatusOr<std::unique_ptr<CoordinatorService>> CoordinatorService::Start(
    const CoordinatorConfig& config) {
  HORA_RETURN_IF_ERROR(ValidateConfig(config));
  auto service = std::make_unique<GrpcCoordinator>(config);
  HORA_RETURN_IF_ERROR(service->Init());
  return std::unique_ptr<CoordinatorService>(std::move(service));
}

GrpcCoordinator::GrpcCoordinator(const CoordinatorConfig& config)
    : config_(config), core_(config) {}

GrpcCoordinator::~GrpcCoordinator() { Shutdown("the coordinator was destroyed", milliseconds(0)); }

Status GrpcCoordinator::Init() {
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
  core_.Start();
  return Status::Ok();
}

void GrpcCoordinator::Shutdown(const std::string& reason, milliseconds drain) {
  MutexLock shutdown_lock(&shutdown_mu_);
  if (shut_down_ || !server_) return;
  shut_down_ = true;
  core_.Drain(reason, drain);
  // Calls still running after the deadline are cancelled; this returns when all handlers have.
  server_->Shutdown(std::chrono::system_clock::now() + milliseconds(200));
  core_.StopThreads();
  server_->Wait();
  HORA_LOG_INFO("coordinator: shut down ({})", reason);
}

grpc::Status GrpcCoordinator::Join(grpc::ServerContext* ctx, const proto::JoinRequest* request,
                                   proto::JoinResponse* response) {
  grpc::Status auth = CheckToken(*ctx, config_.token, "Join");
  if (!auth.ok()) return auth;
  JoinRequest join;
  join.rank = request->rank();
  join.size = request->size();
  join.hostname = request->hostname();
  join.pid = request->pid();
  join.protocol_version = request->protocol_version();
  join.options_digest = request->options_digest();
  Topology topology;
  Status s = core_.Join(join, ctx->peer(), CallDeadline(*ctx), &topology);
  if (!s.ok()) return ToGrpcStatus(s);
  ToProto(topology, response);
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinator::StoreSet(grpc::ServerContext* ctx,
                                       const proto::StoreSetRequest* request,
                                       proto::StoreSetResponse* /*response*/) {
  grpc::Status auth = CheckToken(*ctx, config_.token, "StoreSet");
  if (!auth.ok()) return auth;
  return ToGrpcStatus(core_.StoreSet(request->key(), request->value(), request->erase()));
}

grpc::Status GrpcCoordinator::StoreGet(grpc::ServerContext* ctx,
                                       const proto::StoreGetRequest* request,
                                       proto::StoreGetResponse* response) {
  grpc::Status auth = CheckToken(*ctx, config_.token, "StoreGet");
  if (!auth.ok()) return auth;
  StatusOr<std::string> value =
      core_.StoreGet(request->key(), request->timeout_ms(), CallDeadline(*ctx));
  if (!value.ok()) return ToGrpcStatus(value.status());
  response->set_value(std::move(value).value());
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinator::ReadClock(grpc::ServerContext* ctx,
                                        const proto::ClockRequest* /*request*/,
                                        proto::ClockResponse* response) {
  grpc::Status auth = CheckToken(*ctx, config_.token, "ReadClock");
  if (!auth.ok()) return auth;
  response->set_steady_us(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
          .count());
  return grpc::Status::OK;
}

grpc::Status GrpcCoordinator::Session(
    grpc::ServerContext* ctx,
    grpc::ServerReaderWriter<proto::CoordinatorMessage, proto::WorkerMessage>* stream) {
  grpc::Status auth = CheckToken(*ctx, config_.token, "Session");
  if (!auth.ok()) return auth;
  proto::WorkerMessage wire;
  if (!stream->Read(&wire)) return grpc::Status::OK;
  WorkerMessage message;
  FromProto(wire, &message);
  // A message goes out in as many as keep each under half the limit (ToProtoMessages).
  const size_t limit = static_cast<size_t>(config_.max_message_bytes) / 2;
  auto sink = [stream, limit](CoordinatorMessage& m) {
    std::deque<proto::CoordinatorMessage> wire;
    ToProtoMessages(m, limit, [&wire](size_t) { return &wire.emplace_back(); });
    for (const proto::CoordinatorMessage& out : wire) {
      if (!stream->Write(out)) return false;
    }
    return true;
  };
  std::shared_ptr<SessionStream> session;
  Status opened = core_.OpenSession(
      message, ctx->peer(), sink, [ctx] { ctx->TryCancel(); }, &session);
  if (!opened.ok()) {
    HORA_LOG_ERROR("coordinator: refused a session from {}: {}", ctx->peer(), opened.message());
    return ToGrpcStatus(opened);
  }
  if (!session) return grpc::Status::OK;  // the job was aborted; the rank has been told
  session->Flush();  // the first heartbeat: tells the worker its session is open
  const int rank = session->rank();
  bool goodbye = false;
  TouchedSessions touched;
  while (!goodbye && stream->Read(&wire)) {
    session->Touch(Clock::now());
    FromProto(wire, &message);
    core_.HandleMessage(rank, message, &touched, &goodbye);
    for (const auto& s : touched) s->Flush();
    touched.clear();
  }
  core_.EndSession(rank, session, goodbye);
  return grpc::Status::OK;
}

}  // namespace hora
