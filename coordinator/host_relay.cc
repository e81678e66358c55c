// HostRelay (host_relay.h): a loopback Coordinator server that forwards to the coordinator.
#include "coordinator/host_relay.h"

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>

#include <thread>
#include <unordered_map>

#include "common/logging.h"
#include "common/mutex.h"
#include "coordinator/auth.h"
#include "proto/coordinator.grpc.pb.h"

namespace hora {
namespace {

using std::chrono::milliseconds;
using MemberStream = grpc::ServerReaderWriter<proto::CoordinatorMessage, proto::WorkerMessage>;
using UpstreamStream = grpc::ClientReaderWriter<proto::RelayUp, proto::RelayDown>;

// One rank's session stream at the relay. Only the upstream reader writes to it, under
// write_mu; `done` (set by the handler before it returns) ends the writes.
struct Member {
  grpc::ServerContext* ctx;
  MemberStream* stream;
  Mutex write_mu;
  bool done GUARDED_BY(write_mu) = false;
};

class HostRelayImpl final : public HostRelay, public proto::Coordinator::Service {
 public:
  explicit HostRelayImpl(const HostRelayConfig& config)
      : config_(config), stub_(proto::Coordinator::NewStub(config.upstream)) {}
  ~HostRelayImpl() override { Shutdown(milliseconds(0)); }

  Status Init() {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(config_.max_message_bytes);
    builder.SetMaxSendMessageSize(config_.max_message_bytes);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    if (!server_ || port == 0) return Unavailable("the host relay could not listen on 127.0.0.1");
    address_ = "127.0.0.1:" + std::to_string(port);
    up_ctx_.AddMetadata(kTokenMetadataKey, config_.token);
    up_ = stub_->Relay(&up_ctx_);
    writer_ = std::thread([this] { WriteLoop(); });
    reader_ = std::thread([this] { ReadLoop(); });
    return Status::Ok();
  }

  const std::string& address() const override { return address_; }

  int sessions() const override {
    MutexLock lock(&mu_);
    return static_cast<int>(members_.size());
  }

  void Shutdown(milliseconds drain) override {
    if (!up_) return;  // Init failed
    {
      MutexLock lock(&mu_);
      if (shut_down_) return;
      shut_down_ = true;
      cv_.WaitFor(&mu_, drain, [this] {
        mu_.AssertHeld();
        return members_.empty();
      });
      for (auto& [rank, m] : members_) m->ctx->TryCancel();
      stopping_ = true;
      cv_.NotifyAll();
    }
    writer_.join();  // it ends the Relay stream's writes
    {
      MutexLock lock(&mu_);
      if (!cv_.WaitFor(&mu_, milliseconds(2000), [this] {
            mu_.AssertHeld();
            return reader_done_;
          })) {
        up_ctx_.TryCancel();
      }
    }
    reader_.join();
    (void)up_->Finish();
    server_->Shutdown(std::chrono::system_clock::now() + milliseconds(1000));
    server_->Wait();
  }

  grpc::Status Session(grpc::ServerContext* ctx, MemberStream* stream) override {
    grpc::Status auth = CheckToken(*ctx, config_.token, "Session (host relay)");
    if (!auth.ok()) return auth;
    proto::WorkerMessage message;
    if (!stream->Read(&message)) return grpc::Status::OK;
    if (!message.has_hello()) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "a session must start with Hello");
    }
    const int rank = message.hello().rank();
    auto member = std::make_shared<Member>();
    member->ctx = ctx;
    member->stream = stream;
    {
      MutexLock lock(&mu_);
      if (stopping_ || upstream_over_) {
        return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                            "the host relay of rank " + std::to_string(config_.relay_rank) +
                                " is shutting down or lost the coordinator");
      }
      if (!members_.emplace(rank, member).second) {
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                            "rank " + std::to_string(rank) + " already has a session here");
      }
    }
    Forward(rank, message, "");
    bool goodbye = false;
    while (!goodbye && stream->Read(&message)) {
      goodbye = message.has_goodbye();
      Forward(rank, message, "");
    }
    if (!goodbye) {
      const std::string relay = "its host relay (rank " + std::to_string(config_.relay_rank) + ")";
      Forward(rank, proto::WorkerMessage(),
              Stopping() ? relay + " shut down while it still ran"
                         : "its connection to " + relay + " broke");
    }
    {
      MutexLock lock(&mu_);
      members_.erase(rank);
      cv_.NotifyAll();
    }
    MutexLock write_lock(&member->write_mu);  // waits out a write in progress
    member->done = true;
    return grpc::Status::OK;
  }

  grpc::Status Join(grpc::ServerContext* ctx, const proto::JoinRequest* request,
                    proto::JoinResponse* response) override {
    return Unary(ctx, "Join",
                 [&](grpc::ClientContext* up) { return stub_->Join(up, *request, response); });
  }
  grpc::Status StoreSet(grpc::ServerContext* ctx, const proto::StoreSetRequest* request,
                        proto::StoreSetResponse* response) override {
    return Unary(ctx, "StoreSet",
                 [&](grpc::ClientContext* up) { return stub_->StoreSet(up, *request, response); });
  }
  grpc::Status StoreGet(grpc::ServerContext* ctx, const proto::StoreGetRequest* request,
                        proto::StoreGetResponse* response) override {
    return Unary(ctx, "StoreGet",
                 [&](grpc::ClientContext* up) { return stub_->StoreGet(up, *request, response); });
  }
  grpc::Status ReadClock(grpc::ServerContext* ctx, const proto::ClockRequest* request,
                         proto::ClockResponse* response) override {
    return Unary(ctx, "ReadClock",
                 [&](grpc::ClientContext* up) { return stub_->ReadClock(up, *request, response); });
  }

 private:
  template <typename Call>
  grpc::Status Unary(grpc::ServerContext* ctx, const char* method, Call call) {
    grpc::Status auth = CheckToken(*ctx, config_.token, method);
    if (!auth.ok()) return auth;
    grpc::ClientContext up;
    up.AddMetadata(kTokenMetadataKey, config_.token);
    up.set_deadline(ctx->deadline());
    return call(&up);
  }

  bool Stopping() const {
    MutexLock lock(&mu_);
    return shut_down_;
  }

  // Queues one rank's message (or the news that its connection closed) for the Relay stream.
  void Forward(int rank, const proto::WorkerMessage& message, const std::string& closed) {
    MutexLock lock(&mu_);
    proto::RelayUp::Entry* entry = pending_.add_entries();
    entry->set_rank(rank);
    if (closed.empty()) {
      *entry->mutable_message() = message;
    } else {
      entry->set_closed(closed);
    }
    cv_.NotifyAll();
  }

  // Moves the oldest queued messages into `batch`, as many as keep it under the message limit
  // (each member's message is under it alone: its client splits at the limit less 1 KiB).
  void TakeBatchLocked(proto::RelayUp* batch) REQUIRES(mu_) {
    const size_t limit = static_cast<size_t>(config_.max_message_bytes) - 512;
    size_t bytes = 0;
    int take = 0;
    for (; take < pending_.entries_size(); ++take) {
      const size_t size = pending_.entries(take).ByteSizeLong() + 8;
      if (take > 0 && bytes + size > limit) break;
      bytes += size;
    }
    if (take == pending_.entries_size()) {
      batch->Swap(&pending_);
      return;
    }
    for (int i = 0; i < take; ++i) batch->add_entries()->Swap(pending_.mutable_entries(i));
    pending_.mutable_entries()->DeleteSubrange(0, take);
  }

  void WriteLoop() {
    MutexLock lock(&mu_);
    bool ok = true;
    for (;;) {
      cv_.Wait(&mu_, [this] {
        mu_.AssertHeld();
        return stopping_ || pending_.entries_size() > 0;
      });
      if (pending_.entries_size() == 0 || !ok) break;
      proto::RelayUp batch;
      TakeBatchLocked(&batch);
      batch.set_relay_rank(config_.relay_rank);
      lock.Unlock();
      ok = up_->Write(batch);
      lock.Lock();
    }
    pending_.Clear();
    lock.Unlock();
    if (ok) up_->WritesDone();
  }

  void ReadLoop() {
    proto::RelayDown batch;
    while (up_->Read(&batch)) {
      for (const proto::RelayDown::Entry& entry : batch.entries()) {
        std::shared_ptr<Member> member;
        {
          MutexLock lock(&mu_);
          auto it = members_.find(entry.rank());
          if (it != members_.end()) member = it->second;
        }
        if (!member) continue;  // its session ended: nothing more reaches it
        MutexLock write_lock(&member->write_mu);
        if (!member->done) member->stream->Write(entry.message());
      }
    }
    MutexLock lock(&mu_);
    reader_done_ = true;
    upstream_over_ = true;
    // Without the coordinator the ranks here have no session: each one's client reports it.
    if (!stopping_) {
      HORA_LOG_ERROR("host relay: the stream to the coordinator ended; closing {} session(s)",
                     members_.size());
    }
    for (auto& [rank, m] : members_) m->ctx->TryCancel();
    cv_.NotifyAll();
  }

  const HostRelayConfig config_;
  const std::unique_ptr<proto::Coordinator::Stub> stub_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  grpc::ClientContext up_ctx_;
  std::unique_ptr<UpstreamStream> up_;
  std::thread writer_;
  std::thread reader_;

  mutable Mutex mu_;
  CondVar cv_;
  std::unordered_map<int, std::shared_ptr<Member>> members_ GUARDED_BY(mu_);
  proto::RelayUp pending_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
  bool shut_down_ GUARDED_BY(mu_) = false;
  bool reader_done_ GUARDED_BY(mu_) = false;
  bool upstream_over_ GUARDED_BY(mu_) = false;
};

}  // namespace

StatusOr<std::unique_ptr<HostRelay>> HostRelay::Start(const HostRelayConfig& config) {
  if (!config.upstream) return InvalidArgument("host relay: no channel to the coordinator");
  auto relay = std::make_unique<HostRelayImpl>(config);
  HORA_RETURN_IF_ERROR(relay->Init());
  return std::unique_ptr<HostRelay>(std::move(relay));
}

int HostRelayRankOf(const std::vector<std::string>& hostnames, int rank) {
  const std::string& host = hostnames[rank];
  if (host == hostnames[0]) return -1;
  int lowest = -1;
  int count = 0;
  for (int r = 0; r < static_cast<int>(hostnames.size()); ++r) {
    if (hostnames[r] != host) continue;
    if (lowest < 0) lowest = r;
    ++count;
  }
  return count > 1 ? lowest : -1;
}

}  // namespace hora
