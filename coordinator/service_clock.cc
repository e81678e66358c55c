// The ReadClock RPC: the coordinator's steady clock, for aligning the ranks' timelines.
#include "coordinator/auth.h"
#include "coordinator/service_impl.h"

namespace hora {

grpc::Status CoordinatorServiceImpl::ReadClock(grpc::ServerContext* ctx,
                                               const proto::ClockRequest* /*request*/,
                                               proto::ClockResponse* response) {
  grpc::Status auth = CheckToken(*ctx, config_.token, "ReadClock");
  if (!auth.ok()) return auth;
  response->set_steady_us(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now().time_since_epoch())
          .count());
  return grpc::Status::OK;
}

}  // namespace hora
