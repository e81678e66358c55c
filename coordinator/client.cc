// CoordinatorClient: Connect (channel, Join) and the rendezvous store.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>

#include <sstream>

#include "common/logging.h"
#include "coordinator/auth.h"
#include "coordinator/client_impl.h"
#include "coordinator/convert.h"
#include "coordinator/grpc_process.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
using SystemTime = std::chrono::system_clock::time_point;

StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(const TlsFiles& tls) {
  if (!tls.enabled() && tls.ca_file.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  if (!tls.ca_file.empty())
    HORA_RETURN_IF_ERROR(ReadTlsFile(tls.ca_file, "CA", &options.pem_root_certs));
  if (!tls.cert_file.empty()) {
    HORA_RETURN_IF_ERROR(ReadTlsFile(tls.cert_file, "certificate", &options.pem_cert_chain));
    HORA_RETURN_IF_ERROR(ReadTlsFile(tls.key_file, "key", &options.pem_private_key));
  }
  return grpc::SslCredentials(options);
}

Status ValidateConfig(const ClientConfig& c) {
  if (c.address.empty()) return InvalidArgument("coordinator client: no coordinator address");
  if (c.token.empty()) return InvalidArgument("coordinator client: the job token is empty");
  if (c.size < 1 || c.rank < 0 || c.rank >= c.size) {
    return InvalidArgument("coordinator client: rank " + std::to_string(c.rank) +
                           " is out of range for size " + std::to_string(c.size));
  }
  if (c.heartbeat_interval <= milliseconds(0) || c.heartbeat_timeout <= milliseconds(0) ||
      c.start_timeout <= milliseconds(0)) {
    return InvalidArgument("coordinator client: timeouts must be positive");
  }
  return Status::Ok();
}

std::string Seconds(milliseconds d) {
  std::ostringstream ss;
  ss << static_cast<double>(d.count()) / 1000.0 << " s";
  return ss.str();
}

}  // namespace

grpc::ChannelArguments ClientChannelArgs(const ClientConfig& config) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(config.max_message_bytes);
  args.SetMaxSendMessageSize(config.max_message_bytes);
  // The coordinator may not listen yet: reconnect quickly instead of gRPC's default backoff
  // (1 s growing to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 500);
  // One connection per client, even with several clients in one process (tests).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return args;
}

StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const ClientConfig& config) {
  HORA_RETURN_IF_ERROR(ValidateConfig(config));
  PrepareGrpcProcess();
  StatusOr<std::shared_ptr<grpc::ChannelCredentials>> creds = MakeCredentials(config.tls);
  if (!creds.ok()) return creds.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(config.address, creds.value(), ClientChannelArgs(config));
  const SystemTime deadline = std::chrono::system_clock::now() + config.start_timeout;
  if (!channel->WaitForConnected(deadline)) {
    // gRPC reports a failed TLS handshake as a connection that never comes up.
    const bool tls = config.tls.enabled() || !config.tls.ca_file.empty();
    return Unavailable("cannot connect to the coordinator at " + config.address + " within " +
                       Seconds(config.start_timeout) +
                       (tls ? " (TLS is on: a certificate that the CA does not verify, on "
                              "either side, or a missing client certificate, also ends here)"
                            : ""));
  }
  auto client = std::make_unique<ClientImpl>(config, std::move(channel));
  // The coordinator fails the start itself (naming the missing ranks) at its own deadline;
  // ours is a little later so that its message is the one the caller sees.
  const milliseconds grace =
      std::clamp(config.start_timeout, milliseconds(1000), milliseconds(5000));
  HORA_RETURN_IF_ERROR(client->DoJoin(deadline + grace));
  if (config.host_relay) HORA_RETURN_IF_ERROR(client->UseHostRelay(deadline + grace));
  return std::unique_ptr<CoordinatorClient>(std::move(client));
}

ClientImpl::ClientImpl(const ClientConfig& config, std::shared_ptr<grpc::Channel> channel)
    : config_(config),
      channel_(std::move(channel)),
      stub_(proto::Coordinator::NewStub(channel_)),
      address_(config.address) {}

std::string ClientImpl::Where() const {
  if (relay_rank_ < 0) return config_.address;
  return config_.address + " (through the host relay of rank " + std::to_string(relay_rank_) +
         " at " + address_ + ")";
}

ClientImpl::~ClientImpl() {
  Close();
  if (reader_.joinable() && reader_.get_id() != std::this_thread::get_id()) reader_.join();
}

void ClientImpl::AddToken(grpc::ClientContext* ctx) const {
  ctx->AddMetadata(kTokenMetadataKey, config_.token);
}

// A rank that shuts down and starts again may reach rank 0's previous coordinator while it
// still drains: that one answers UNAVAILABLE (or cancels the call as its server stops), and
// Join tries again, until the deadline, at the same address where the new one will listen.
Status ClientImpl::DoJoin(SystemTime deadline) {
  for (;;) {
    bool again = false;
    Status s = JoinOnce(deadline, &again);
    if (!again || std::chrono::system_clock::now() >= deadline) return s;
    std::this_thread::sleep_for(milliseconds(50));
  }
}

Status ClientImpl::JoinOnce(SystemTime deadline, bool* again) {
  grpc::ClientContext ctx;
  AddToken(&ctx);
  ctx.set_deadline(deadline);
  ctx.set_wait_for_ready(true);
  proto::JoinRequest request;
  request.set_rank(config_.rank);
  request.set_size(config_.size);
  request.set_hostname(config_.hostname);
  request.set_pid(config_.pid);
  request.set_protocol_version(kProtocolVersion);
  request.set_options_digest(config_.options_digest);
  proto::JoinResponse response;
  grpc::Status st = stub_->Join(&ctx, request, &response);
  *again = st.error_code() == grpc::StatusCode::UNAVAILABLE ||
           st.error_code() == grpc::StatusCode::CANCELLED;
  if (!st.ok()) {
    return FromGrpcStatus(
        st, "rank " + std::to_string(config_.rank) + ": Join with the coordinator at " + Where());
  }
  HORA_RETURN_IF_ERROR(FromProto(response, &topology_));
  if (static_cast<int>(topology_.ranks.size()) != config_.size) {
    return Internal("the coordinator answered Join with " + std::to_string(topology_.ranks.size()) +
                    " ranks, expected " + std::to_string(config_.size));
  }
  return Status::Ok();
}

Status ClientImpl::Set(const std::string& key, const std::string& value) {
  grpc::ClientContext ctx;
  AddToken(&ctx);
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::max(config_.start_timeout, milliseconds(10000)));
  proto::StoreSetRequest request;
  request.set_key(key);
  request.set_value(value);
  proto::StoreSetResponse response;
  grpc::Status st = stub_->StoreSet(&ctx, request, &response);
  return FromGrpcStatus(st, "store set '" + key + "' at the coordinator " + Where());
}

Status ClientImpl::Delete(const std::string& key) {
  grpc::ClientContext ctx;
  AddToken(&ctx);
  ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(10000));
  proto::StoreSetRequest request;
  request.set_key(key);
  request.set_erase(true);
  proto::StoreSetResponse response;
  grpc::Status st = stub_->StoreSet(&ctx, request, &response);
  return FromGrpcStatus(st, "store delete '" + key + "' at the coordinator " + Where());
}

StatusOr<std::string> ClientImpl::Get(const std::string& key, milliseconds timeout) {
  grpc::ClientContext ctx;
  AddToken(&ctx);
  // The coordinator answers DEADLINE_EXCEEDED itself; ours only guards against a lost reply.
  ctx.set_deadline(std::chrono::system_clock::now() + timeout + milliseconds(5000));
  proto::StoreGetRequest request;
  request.set_key(key);
  request.set_timeout_ms(timeout.count());
  proto::StoreGetResponse response;
  grpc::Status st = stub_->StoreGet(&ctx, request, &response);
  if (st.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
    return DeadlineExceeded("store: key '" + key + "' was not set within " +
                            std::to_string(timeout.count()) + " ms");
  }
  if (!st.ok()) return FromGrpcStatus(st, "store get '" + key + "' at the coordinator " + Where());
  return std::string(response.value());
}

}  // namespace hora
