// Cross-memory transfers of the point-to-point channel (peer_channel.h) between processes of
// one host: which peers to probe, the probe a dialer sends and its check by the acceptor, the
// kPeerDataAt frame that says where a tensor is in the sender's memory, the reads, and the
// messages parked there until their recv comes (peer_wire.h has the frames).
//
// Thread safety: Park and Unpark under the channel's lock; the rest from any thread.
#ifndef HORA_COLLECTIVES_PEER_CROSS_MEMORY_H_
#define HORA_COLLECTIVES_PEER_CROSS_MEMORY_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "collectives/peer_channel.h"
#include "collectives/peer_wire.h"

namespace hora {

class PeerCrossMemory {
 public:
  using Key = PeerChannel::Key;

  // Peers with this process's hostname are probed when min_bytes > 0; tensors of at least
  // min_bytes then go by cross-memory once their connection's probe succeeded.
  PeerCrossMemory(const BackendConfig& config, int64_t min_bytes);

  // Whether a connection dialed to `peer` starts with Probe().
  bool Probes(int peer) const;
  // A token in this process's memory, for the acceptor to read.
  PeerOut Probe() const;
  // An accepted connection's kPeerProbe body: true when the dialer's token could be read
  // (then the acceptor answers kPeerProbeOk).
  static bool Verify(const std::string& body);

  // A data frame of `bytes` at `data` becomes a kPeerDataAt when its connection's probe
  // succeeded (`probed`) and it is large enough. Returns its send's live word (null: the
  // frame stays as it was), to Release before the send's completion runs.
  using Live = std::atomic<uint64_t>;
  Live* Describe(bool probed, const void* data, int64_t bytes, PeerOut* frame) const;
  static void Release(Live* live);
  // A kPeerDataAt's body; false when malformed.
  static bool Parse(const std::string& body, PeerTensorAt* at);
  // Copies `at` into `to` (ReadPeerMemory), then checks that its send was still pending,
  // counting the reads that succeed.
  std::string Read(const PeerTensorAt& at, char* to);
  int64_t reads() const { return reads_.load(std::memory_order_relaxed); }

  // A message that waits in its sender's memory for its recv (PeerMatch::Park).
  void Park(int peer, const Key& key, const PeerTensorAt& at) { parked_[{peer, key}] = at; }
  // Where a parked message is, forgetting it; false when none is parked under that key.
  bool Unpark(int peer, const Key& key, PeerTensorAt* at);

 private:
  const int64_t min_bytes_;
  std::vector<bool> same_host_;  // per rank
  uint32_t token_[4];
  std::atomic<int64_t> reads_{0};
  // An entry whose message ended otherwise (stalled, its connection closed) stays until the
  // channel closes: a few bytes.
  std::map<std::pair<int, Key>, PeerTensorAt> parked_;
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_PEER_CROSS_MEMORY_H_
