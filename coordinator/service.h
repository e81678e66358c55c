// The coordinator: a gRPC service that runs in rank 0 and drives the Planner.
//
// It answers Join with the topology once every rank has joined, serves the rendezvous store,
// and keeps one session stream per rank: it feeds ready notices to the planner, sends every
// rank its plans (same global bucket order on every rank, each rank's own tensor ids), tells
// every rank at once when one rank dies (its stream breaks without Goodbye, or it misses
// heartbeats for heartbeat_timeout), logs stalls and aborts on the stall timeout.
//
// Every RPC must carry the job token in metadata "hora-token"; any other is refused with
// UNAUTHENTICATED and logged. Messages larger than max_message_bytes are refused.
//
// Thread safety: Start, port and Shutdown may be called from any thread. Shutdown is
// idempotent; the destructor calls it with no drain.
#ifndef HORA_COORDINATOR_SERVICE_H_
#define HORA_COORDINATOR_SERVICE_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "common/limits.h"
#include "common/status.h"
#include "coordinator/autotuner.h"
#include "coordinator/planner.h"

namespace hora {

class LocalSessionHost;  // coordinator/local_session.h

struct TlsFiles {
  std::string cert_file;  // PEM; all three empty = no TLS
  std::string key_file;
  std::string ca_file;
  bool enabled() const { return !cert_file.empty(); }
};

struct CoordinatorConfig {
  std::string listen_address = "127.0.0.1:0";  // host:port; port 0 picks a free port
  int size = 1;
  std::string token;           // required, non-empty
  std::string options_digest;  // ranks whose digest differs are refused, saying which
  PlannerConfig planner;
  // HORA_AUTOTUNE: the coordinator tunes the planners' fusion threshold and cycle time
  // (coordinator/autotuner.h) and tells every rank the settings (TuningNotice).
  AutotuneConfig autotune;
  std::chrono::milliseconds start_timeout = kDefaultStartTimeout;
  std::chrono::milliseconds heartbeat_interval = kDefaultHeartbeatInterval;
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
  std::chrono::milliseconds stall_warning = kDefaultStallWarning;
  std::chrono::milliseconds stall_timeout{0};  // 0 = off
  int max_message_bytes = static_cast<int>(kDefaultMaxMessageBytes);
  TlsFiles tls;
  // The diagnosis (service_diagnose.cc): how long a round waits for the ranks' reports
  // (0 = no diagnosis: a stall timeout aborts at once), and the file every report is appended
  // to ("" = the log only).
  std::chrono::milliseconds diagnose_deadline = kDefaultDiagnoseDeadline;
  std::string diagnose_file;
  // Called with each round's one-message summary and whole report (rank 0's timeline records
  // them), under the service's lock: it must not block or call the service.
  std::function<void(const std::string& summary, const std::string& report)> on_diagnosis;
};

class CoordinatorService {
 public:
  static StatusOr<std::unique_ptr<CoordinatorService>> Start(const CoordinatorConfig& config);
  virtual ~CoordinatorService() = default;

  // The port actually bound (useful with port 0).
  virtual int port() const = 0;

  // The names the service keeps a rank's id and spec for, summed over the ranks (one-shot
  // names are forgotten once planned: IsOneShotName in common/types.h).
  virtual size_t KnownNames() = 0;

  // For the client of the rank in this process (ClientConfig::local_host). Valid until the
  // service is destroyed.
  virtual LocalSessionHost* local_host() = 0;

  // Ends the service. First waits up to `drain` for every rank still connected to say
  // Goodbye (a normal, collective shutdown); ranks still connected after that receive
  // Abort(kAborted, reason). Then stops the server and joins every thread.
  virtual void Shutdown(const std::string& reason, std::chrono::milliseconds drain) = 0;
};

}  // namespace hora

#endif  // HORA_COORDINATOR_SERVICE_H_
