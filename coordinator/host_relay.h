// A host relay: the control plane of a host's ranks reaches the coordinator through one of
// them, so that rank 0 holds one connection and one session stream per host, not per rank.
//
// The relay is a Coordinator server on the host's loopback, run by the host's lowest rank
// (the "relay rank", a rank of the job like any other, whose own client uses the relay too).
// The host's ranks join the coordinator directly (that gives the topology that says who
// relays), then read the relay's address from the store and move to it:
//   - Session: each rank's stream ends at the relay, which forwards every message onto ONE
//     Relay stream to the coordinator (messages queued while a write is in flight go out
//     together) and hands each answer to its rank's stream. Heartbeats travel both ways per
//     rank, so the coordinator still watches every rank, and a rank whose connection to the
//     relay ends without Goodbye is reported to the coordinator as lost, naming the relay.
//   - StoreSet, StoreGet, Join and ReadClock are forwarded call by call, deadline included.
// If the Relay stream breaks, every rank's stream to the relay is cancelled (each rank then
// reports the coordinator lost); if the relay's process dies, the coordinator names its rank
// as lost, then the ranks behind it. Like rank 0, the relay rank's shutdown waits up to the
// heartbeat timeout for its host's ranks to say Goodbye before it cuts them off. A rank that
// stops reading its stream holds up the relay's deliveries to the whole host; the coordinator
// then names the host's ranks as not reading after the heartbeat timeout. The relay listens on
// 127.0.0.1 without TLS (the job token is still checked); the connection to the coordinator uses
// the job's TLS settings.
//
// Thread safety: all methods are thread-safe.
#ifndef HORA_COORDINATOR_HOST_RELAY_H_
#define HORA_COORDINATOR_HOST_RELAY_H_

#include <grpcpp/channel.h>

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"

namespace hora {

struct HostRelayConfig {
  std::string token;
  int relay_rank = 0;
  std::shared_ptr<grpc::Channel> upstream;  // to the coordinator, connected
  int max_message_bytes = 0;
};

class HostRelay {
 public:
  static StatusOr<std::unique_ptr<HostRelay>> Start(const HostRelayConfig& config);
  virtual ~HostRelay() = default;  // Shutdown(0) first

  // "127.0.0.1:port": where the host's ranks connect.
  virtual const std::string& address() const = 0;
  // The ranks whose session is open on the relay now.
  virtual int sessions() const = 0;
  // Waits up to `drain` for every rank's session to end (each rank says Goodbye when it
  // shuts down), then cancels what is left, ends the Relay stream and stops the server.
  virtual void Shutdown(std::chrono::milliseconds drain) = 0;
};

// The rank that relays `rank`'s control plane, or -1 for none: ranks on rank 0's host reach
// the coordinator directly, and so does a rank alone on its host.
int HostRelayRankOf(const std::vector<std::string>& hostnames, int rank);

}  // namespace hora

#endif  // HORA_COORDINATOR_HOST_RELAY_H_
