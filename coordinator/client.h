// The worker side of the control plane: join, rendezvous store and the session stream.
//
// Connect() performs Join and blocks until every rank has joined (or the start timeout, or a
// refusal naming the reason). StartSession() opens the stream and waits (up to
// heartbeat_timeout) for the coordinator's answer to Hello; from then on a reader thread
// delivers the coordinator's messages through the callbacks, and a heartbeat thread sends a
// heartbeat every heartbeat_interval. Send*() write directly onto the stream (no hand-off to
// another thread: this is the latency path). If nothing arrives from the coordinator for
// heartbeat_timeout, or the stream breaks, on_abort is called once with a PEER_FAILURE naming
// the coordinator (rank 0 and its address).
//
// Thread safety: all methods are thread-safe. Callbacks run on the client's reader thread, one
// at a time; they must not block for long (Close() may be called from one). Close() says
// Goodbye, stops and joins both threads, bounded in time; the destructor calls it.
#ifndef HORA_COORDINATOR_CLIENT_H_
#define HORA_COORDINATOR_CLIENT_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/kv_store.h"
#include "common/limits.h"
#include "common/status.h"
#include "coordinator/messages.h"
#include "coordinator/service.h"

namespace hora {

struct ClientConfig {
  std::string address;  // host:port of the coordinator
  std::string token;
  int rank = 0;
  int size = 1;
  std::string hostname;
  int64_t pid = 0;
  std::string options_digest;
  std::chrono::milliseconds start_timeout = kDefaultStartTimeout;
  std::chrono::milliseconds heartbeat_interval = kDefaultHeartbeatInterval;
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
  int max_message_bytes = static_cast<int>(kDefaultMaxMessageBytes);
  TlsFiles tls;
  // Set when the coordinator runs in this process (rank 0): the session then runs by function
  // calls instead of a stream (Join and the store still go through gRPC). Not owned; must
  // outlive the client.
  LocalSessionHost* local_host = nullptr;
  // Reach the coordinator through the host's relay (host_relay.h) after Join, where
  // HostRelayRankOf names one; the relay rank runs it.
  bool host_relay = false;
};

// What this rank has said to the coordinator since the session began (Heartbeats and Goodbye
// aside): every Ready, JoinOp, ProcessSetOp and Failure message, and the tensors announced in
// the Ready messages. A steady step adds nothing to either (docs/design.md "Steady state").
struct ControlCounters {
  int64_t messages = 0;
  int64_t notices = 0;
};

struct SessionCallbacks {
  std::function<void(PlanMessage)> on_plan;
  std::function<void(int32_t process_set, int last_joined_rank)> on_join_done;
  std::function<void(ProcessSetResult)> on_process_set;
  std::function<void(TuningNotice)> on_tuning;  // HORA_AUTOTUNE: the settings changed
  // The coordinator asks for this rank's diagnosis report (SendDiagnosis answers it). Also
  // delivered after on_abort: an abort is when a diagnosis matters most.
  std::function<void(DiagnosisRequest)> on_diagnose;
  // Called at most once: the job is broken (another rank died, the coordinator is lost,
  // a stall timeout fired). The status names the cause.
  std::function<void(Status)> on_abort;
};

class CoordinatorClient : public KvStore {
 public:
  static StatusOr<std::unique_ptr<CoordinatorClient>> Connect(const ClientConfig& config);
  ~CoordinatorClient() override = default;

  virtual const Topology& topology() const = 0;

  virtual Status StartSession(SessionCallbacks callbacks) = 0;
  // Write to the session stream under a write lock. They return at once unless gRPC flow
  // control holds the write (the coordinator is not reading); such a write ends at the
  // latest when the heartbeat watchdog or Close() cancels the call. Dropped before
  // StartSession and after the stream ended.
  virtual void SendReady(std::vector<ReadyNotice> notices) = 0;
  // How the runtime batches its notices (runtime/engine.h "Notice batching"): while fewer
  // than this many of its notices wait for their plan, a new one goes out at once in a message
  // of its own; past that, new ones wait (at most the planner's cycle time, or until the
  // answers bring the count under it) and go out together. coordinator_scale_bench's default
  // batching is this one.
  static constexpr int kUnbatchedNotices = 4;
  virtual void SendJoin(int32_t process_set) = 0;
  virtual void SendProcessSetOp(const ProcessSetOp& op) = 0;
  // Tell the coordinator this rank hit an unrecoverable error (it aborts the job with it).
  virtual void SendFailure(const std::string& message) = 0;
  // The diagnosis (proto/coordinator.proto, step 4): answer a request, or ask for a round.
  // Not counted in sent().
  virtual void SendDiagnosis(const DiagnosisReport& report) = 0;
  virtual void SendDiagnoseAsk(const std::string& why) = 0;
  // This rank's timeline went on (or off): from the coordinator's reading of it, this rank's
  // plans carry (or no longer carry) the arrivals its timeline shows. Not counted in sent().
  virtual void SendTimings(bool on) = 0;
  virtual ControlCounters sent() const = 0;
  // The rank whose host relay carries this rank's session and store calls, or -1 (direct).
  virtual int relay_rank() const = 0;
  // Goodbye, then stop and join the threads. Idempotent.
  virtual void Close() = 0;
  // The coordinator's steady clock minus this process's, in microseconds, for aligning the
  // ranks' timelines: of a few Clock round trips, the shortest wins (the error is at most half
  // of it). 0 in rank 0, whose coordinator shares its clock. Blocks for the round trips
  // (each bounded by 2 s).
  virtual StatusOr<int64_t> ClockOffsetUs() = 0;
};

}  // namespace hora

#endif  // HORA_COORDINATOR_CLIENT_H_
