// ClockOffsetUs: the coordinator's steady clock relative to ours, NTP-like.
//
// Each ReadClock round trip reads our clock before (t0) and after (t1) the call, and the
// coordinator's in between (c); if the coordinator answered in the middle, its clock minus
// ours is c - (t0 + t1) / 2, and the error is at most (t1 - t0) / 2. Of a few round trips the
// shortest is kept: it had the least queueing on either side.
#include "common/logging.h"
#include "coordinator/client_impl.h"
#include "coordinator/convert.h"

namespace hora {
namespace {

constexpr int kClockRoundTrips = 8;

int64_t SteadyUs() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StatusOr<int64_t> ClientImpl::ClockOffsetUs() {
  if (config_.local_host != nullptr) return int64_t{0};  // same process, same clock
  int64_t best_rtt = -1;
  int64_t offset = 0;
  for (int i = 0; i < kClockRoundTrips; ++i) {
    grpc::ClientContext ctx;
    AddToken(&ctx);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    proto::ClockRequest request;
    proto::ClockResponse response;
    const int64_t t0 = SteadyUs();
    grpc::Status st = stub_->ReadClock(&ctx, request, &response);
    const int64_t t1 = SteadyUs();
    if (!st.ok()) return FromGrpcStatus(st, "clock at the coordinator " + Where());
    if (best_rtt < 0 || t1 - t0 < best_rtt) {
      best_rtt = t1 - t0;
      offset = response.steady_us() - (t0 + t1) / 2;
    }
  }
  HORA_LOG_INFO("clock: coordinator minus rank {} = {} us (round trip {} us)", config_.rank, offset,
                best_rtt);
  return offset;
}

}  // namespace hora
