// Internal to coordinator/: the gRPC adapter, what CoordinatorService::Start returns. It owns
// the coordinator's core (core.h) and a gRPC server, checks every call's token, converts
// between proto/coordinator.proto and the core's plain messages (convert.h) and calls the
// core. Nothing here decides anything about the job.
//
// Files: grpc_service.cc (start, shutdown, Join, the store, ReadClock, the session streams),
// service_relay.cc (the host relays' streams).
#ifndef HORA_COORDINATOR_GRPC_SERVICE_H_
#define HORA_COORDINATOR_GRPC_SERVICE_H_

#include <grpcpp/server.h>
#include <grpcpp/server_context.h>

#include <memory>
#include <string>

#include "common/mutex.h"
#include "coordinator/core.h"
#include "coordinator/service.h"
#include "proto/coordinator.grpc.pb.h"

namespace hora {

class GrpcCoordinator final
    : public CoordinatorService,
      public proto::Coordinator::WithCallbackMethod_Relay<proto::Coordinator::Service> {
 public:
  explicit GrpcCoordinator(const CoordinatorConfig& config);
  ~GrpcCoordinator() override;

  // Builds and starts the server, then the core's threads.
  Status Init();

  int port() const override { return port_; }
  size_t KnownNames() override { return core_.KnownNames(); }
  LocalSessionHost* local_host() override { return &core_; }
  void Shutdown(const std::string& reason, std::chrono::milliseconds drain) override;

  grpc::Status Join(grpc::ServerContext* ctx, const proto::JoinRequest* request,
                    proto::JoinResponse* response) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx, const proto::StoreSetRequest* request,
                        proto::StoreSetResponse* response) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx, const proto::StoreGetRequest* request,
                        proto::StoreGetResponse* response) override;
  // The coordinator's steady clock, for aligning the ranks' timelines.
  grpc::Status ReadClock(grpc::ServerContext* ctx, const proto::ClockRequest* request,
                         proto::ClockResponse* response) override;
  // One rank's session for the whole job: this handler thread reads the rank's messages.
  grpc::Status Session(
      grpc::ServerContext* ctx,
      grpc::ServerReaderWriter<proto::CoordinatorMessage, proto::WorkerMessage>* stream) override;
  // service_relay.cc: a reactor, not a thread per stream (callback API): each message is
  // handled on the gRPC thread that read it.
  grpc::ServerBidiReactor<proto::RelayUp, proto::RelayDown>* Relay(
      grpc::CallbackServerContext* ctx) override;

 private:
  const CoordinatorConfig config_;
  CoordinatorCore core_;
  std::unique_ptr<grpc::Server> server_;  // after core_: destroyed first
  int port_ = 0;

  Mutex shutdown_mu_;  // serializes Shutdown
  bool shut_down_ GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace hora

#endif  // HORA_COORDINATOR_GRPC_SERVICE_H_
