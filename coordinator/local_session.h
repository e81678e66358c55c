// In-process sessions: rank 0's client lives in the same process as the coordinator, so its
// session runs by function calls instead of a gRPC stream to itself. That takes rank 0's
// two network legs, its heartbeats and two thread wake-ups off every operation, and the
// messages are the core's plain structs: no protobuf on rank 0's own path.
//
// Internal to coordinator/: the core implements it, the client uses it; the runtime only
// passes the pointer from CoordinatorService::local_host() to ClientConfig::local_host.
#ifndef HORA_COORDINATOR_LOCAL_SESSION_H_
#define HORA_COORDINATOR_LOCAL_SESSION_H_

#include <functional>

#include "common/status.h"
#include "coordinator/messages.h"

namespace hora {

class LocalSessionHost {
 public:
  using Sink = std::function<void(CoordinatorMessage&)>;  // may take the message's contents
  virtual ~LocalSessionHost() = default;

  // Opens `rank`'s session (the rank must have joined). `sink` receives every message for the
  // rank, in order, on whichever thread flushes it, never under the service's lock; it must
  // not call back into the host. A job already aborted delivers its Abort to the sink at once.
  virtual Status OpenLocalSession(int rank, Sink sink) = 0;

  // Handles one message from `rank` as its session handler would (Goodbye ends the session).
  virtual void LocalMessage(int rank, WorkerMessage message) = 0;
};

}  // namespace hora

#endif  // HORA_COORDINATOR_LOCAL_SESSION_H_
