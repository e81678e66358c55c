// TcpPeerChannel: PeerChannel over TCP (peer_channel.h). One listening socket, one connection
// per direction of a pair, dialed by the sender on its first message; one thread reads every
// connection and writes what a caller could not write at once.
//
// The frames and one connection's framing are in peer_wire.h. A message whose recv is posted
// while its body is arriving (into a buffer of its own) has the rest of its body read straight
// into the recv's output. Internal to collectives/ (PeerChannel::Open makes one):
// peer_channel_tcp.cc has the calls and the writing side, peer_channel_loop.cc the thread.
#ifndef HORA_COLLECTIVES_PEER_CHANNEL_TCP_H_
#define HORA_COLLECTIVES_PEER_CHANNEL_TCP_H_

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "collectives/peer_channel.h"
#include "collectives/peer_cross_memory.h"
#include "collectives/peer_match.h"
#include "collectives/peer_wire.h"
#include "collectives/tcp_mesh.h"
#include "common/mutex.h"

namespace hora {

class TcpPeerChannel final : public PeerChannel {
 public:
  TcpPeerChannel(const BackendConfig& config, Options options, TcpListener listener, int wake);
  ~TcpPeerChannel() override;
  void Send(int peer, Key key, Meta meta, const void* data, std::string what, Done done) override;
  void SendRefusal(int peer, Key key, const Status& why) override;
  void Recv(int peer, Key key, Meta meta, void* out, std::string what, Done done) override;
  void RefuseRecv(int peer, Key key, const Status& why) override;
  int64_t cross_memory_reads() const override { return cross_.reads(); }

  void Abort(const Status& why) override;

 private:
  using Clock = std::chrono::steady_clock;
  using Effects = PeerMatch::Effects;

  // A recv took a message parked in the sender's memory: reads it, then answers the sender.
  void TakeParked(int peer, const Key& key, const PeerTensorAt& at, char* out,
                  PeerMatch::Take* take, PeerMatch::Effects* e);

  // Runs what the matcher decided: on_lost first, then the completions, then on_stall.
  void Run(Effects* e);
  void Wake();  // the loop

  static PeerOut Text(PeerFrameKind kind, const Key& key, const Status& s);

  // How errors name `peer`.
  std::string Named(int peer) const;

  // Why nothing more can be exchanged with `peer`; OK when it can.
  Status Refused(int peer) const REQUIRES(mu_);

  // The connection this process sends to `peer` on, dialed on first use.
  StatusOr<int> Dial(int peer, const std::string& what);

  // Appends a frame; writes what the socket takes at once when nothing is ahead of it.
  void Queue(int id, PeerOut o, Effects* e) REQUIRES(mu_);

  // Queues the acknowledgements the matcher decided on.
  void Answer(Effects* e) REQUIRES(mu_);

  // Writes queued frames until the socket is full.
  void Flush(PeerConn* c, Effects* e) REQUIRES(mu_);

  // The connection failed or ended: nothing more to or from its peer. Without its goodbye
  // the peer died (or its host is unreachable): on_lost hears of it.
  void Lost(PeerConn* c, const std::string& how, Effects* e) REQUIRES(mu_);

  // The thread: reads, writes what waits, lost peers' verdicts, stalls (peer_channel_loop.cc).
  void Loop();

  // Until the loop next has something to check: a suspect's grace, the stall check.
  int PollMs();

  void Accept();

  // What the frames read on the loop mean (PeerConn::Reader), with the loop's effects.
  class Reader;

  // After the loop ended: fails everything pending (with the abort's reason).
  void FailAll();

  KvStore* const store_;
  const std::string key_prefix_;
  const int rank_;
  const int size_;
  const std::chrono::milliseconds dial_timeout_;
  const Options options_;
  const TcpListener listener_;
  const int wake_;  // an eventfd: wakes the loop
  std::thread thread_;
  std::mutex join_mu_;
  std::mutex dial_mu_;
  char scratch_[1 << 16];  // the loop's: where a dropped body goes
  PeerCrossMemory cross_;  // its parked messages under mu_

  Mutex mu_;
  Status aborted_ GUARDED_BY(mu_);
  PeerMatch match_ GUARDED_BY(mu_);
  int next_conn_ GUARDED_BY(mu_) = 0;
  std::map<int, std::unique_ptr<PeerConn>> conns_ GUARDED_BY(mu_);
  std::map<int, int> dialed_ GUARDED_BY(mu_);  // peer -> connection
  // Peers whose connection ended without a goodbye: why, and when it stands.
  std::map<int, std::pair<Status, Clock::time_point>> suspects_ GUARDED_BY(mu_);
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_PEER_CHANNEL_TCP_H_
