// Internal to coordinator/: the implementation behind CoordinatorClient (client.h).
// client.cc: Connect, Join, the store; client_session.cc: the session stream and its threads.
#ifndef HORA_COORDINATOR_CLIENT_IMPL_H_
#define HORA_COORDINATOR_CLIENT_IMPL_H_

#include <grpcpp/channel.h>
#include <grpcpp/client_context.h>
#include <grpcpp/support/channel_arguments.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/mutex.h"
#include "coordinator/client.h"
#include "coordinator/host_relay.h"
#include "coordinator/local_session.h"
#include "coordinator/planner.h"
#include "proto/coordinator.grpc.pb.h"

namespace hora {

// The channel arguments of every client channel (to the coordinator or a host relay).
grpc::ChannelArguments ClientChannelArgs(const ClientConfig& config);

class ClientImpl final : public CoordinatorClient {
 public:
  ClientImpl(const ClientConfig& config, std::shared_ptr<grpc::Channel> channel);
  ~ClientImpl() override;

  // Sends Join and waits for the topology until `deadline`.
  Status JoinOnce(std::chrono::system_clock::time_point deadline, bool* again);
  Status DoJoin(std::chrono::system_clock::time_point deadline);
  // client_relay.cc: after Join, moves the store and the session to the host's relay (and
  // starts it on the relay rank), when HostRelayRankOf names one.
  Status UseHostRelay(std::chrono::system_clock::time_point deadline);

  const Topology& topology() const override { return topology_; }
  Status Set(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override;
  Status Delete(const std::string& key) override;

  Status StartSession(SessionCallbacks callbacks) override;
  void SendReady(std::vector<ReadyNotice> notices) override;
  void SendJoin(int32_t process_set) override;
  void SendProcessSetOp(const ProcessSetOp& op) override;
  void SendFailure(const std::string& message) override;
  void SendDiagnosis(const DiagnosisReport& report) override;
  void SendDiagnoseAsk(const std::string& why) override;
  void SendTimings(bool on) override;
  ControlCounters sent() const override;
  int relay_rank() const override { return relay_rank_; }
  void Close() override;
  StatusOr<int64_t> ClockOffsetUs() override;  // client_clock.cc

 private:
  using Stream = grpc::ClientReaderWriter<proto::WorkerMessage, proto::CoordinatorMessage>;

  void AddToken(grpc::ClientContext* ctx) const;
  // The coordinator's address, and the relay's when there is one: for messages.
  std::string Where() const;
  // Hands one message to the local session, or writes it under write_mu_ (converted for the
  // wire, in as many messages as the limit asks). Returns how many went out; 0 when the
  // stream is over. A counted message adds to sent() as it is handed over, before its answer
  // can come back.
  int Write(WorkerMessage message, bool counted = false) EXCLUDES(write_mu_);
  // Write, counted in sent(): the messages of the Send* calls.
  void Send(WorkerMessage message) EXCLUDES(write_mu_);
  // Goodbye, then stops the threads (Close, with close_mu_ held).
  void CloseSession() EXCLUDES(mu_, write_mu_);
  void ReaderLoop() EXCLUDES(mu_, write_mu_);
  void HeartbeatLoop() EXCLUDES(mu_, write_mu_);
  // Runs the callback for one message from the coordinator; `converted` says whether it came
  // from the wire intact (a malformed plan or set result aborts the job).
  void Dispatch(CoordinatorMessage& message, const Status& converted);
  void FireAbort(const Status& status);
  std::string LostCoordinator(const std::string& why) const;
  // Waits for the coordinator's answer to Hello; on failure stops the threads.
  Status AwaitSessionOpen() EXCLUDES(mu_);

  // Constant once Connect returns (UseHostRelay may replace the channel before).
  const ClientConfig config_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::Coordinator::Stub> stub_;
  Topology topology_;                 // set by DoJoin before Connect returns
  std::unique_ptr<HostRelay> relay_;  // on the relay rank
  int relay_rank_ = -1;               // whose relay carries this rank's session, or -1
  std::string address_;               // where channel_ goes

  Mutex close_mu_;  // serializes StartSession and Close
  bool closed_ GUARDED_BY(close_mu_) = false;
  std::atomic<bool> closing_{false};

  // Set by StartSession before the threads start; constant afterwards.
  SessionCallbacks callbacks_;
  std::unique_ptr<grpc::ClientContext> session_ctx_;
  std::unique_ptr<Stream> stream_;
  std::thread reader_;
  std::thread heartbeat_;

  Mutex write_mu_ ACQUIRED_AFTER(close_mu_);        // the order: close_mu_, write_mu_, mu_
  bool writes_done_ GUARDED_BY(write_mu_) = false;  // WritesDone or Finish happened

  std::atomic<Clock::rep> last_recv_{0};
  std::atomic<int64_t> sent_messages_{0};  // ControlCounters
  std::atomic<int64_t> sent_notices_{0};
  std::atomic<bool> abort_fired_{false};

  Mutex mu_ ACQUIRED_AFTER(write_mu_);
  CondVar cv_;
  bool stop_heartbeat_ GUARDED_BY(mu_) = false;
  bool reader_done_ GUARDED_BY(mu_) = false;
  Status watchdog_status_ GUARDED_BY(mu_);     // why the heartbeat thread cancelled the call
  bool acked_ GUARDED_BY(mu_) = false;         // the coordinator answered Hello
  grpc::Status final_status_ GUARDED_BY(mu_);  // the call's status once reader_done_
  std::atomic<bool> acked_fast_{false};        // acked_, readable without mu_
  bool local_ = false;  // the session runs through config_.local_host; set by StartSession
};

}  // namespace hora

#endif  // HORA_COORDINATOR_CLIENT_IMPL_H_
