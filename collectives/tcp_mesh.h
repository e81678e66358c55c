// TCP connections among the members of a process set, bootstrapped through the set's KvStore:
// what the mailbox (mailbox.h) and the tcp backend (tcp/) connect with.
//
// Member i connects to every linked member below it and accepts from every linked member
// above it, `channels` connections per pair. Each member publishes "address port token" under
// key_prefix + rank; the connecting side presents the acceptor's token (which only the store
// holds), its rank and the channel index, so a stray connection is dropped and the channels
// of a pair are matched by index on both sides. Every socket comes back non-blocking, Nagle
// off, close-on-exec, with SO_SNDBUF / SO_RCVBUF set when buffer_bytes > 0.
//
// Bounded by config.timeout: a member that never publishes, never connects or never accepts
// ends the call with DEADLINE_EXCEEDED or UNAVAILABLE naming it.
#ifndef HORA_COLLECTIVES_TCP_MESH_H_
#define HORA_COLLECTIVES_TCP_MESH_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "collectives/registry.h"
#include "common/status.h"

namespace hora {

struct MeshSpec {
  std::string key_prefix;    // unique to this mesh; the same on every member
  std::vector<bool> linked;  // by member: connect to it (the relation is symmetric)
  int channels = 1;          // connections per linked pair, >= 1
  int buffer_bytes = 0;      // SO_SNDBUF / SO_RCVBUF; 0: the kernel's autotuning
  std::string what = "tcp";  // names the caller in errors ("mailbox", "tcp backend")
};

// fds[m][c]: channel c to member m (empty for members not linked and for this member).
// The caller owns the descriptors. Collective over the linked members.
StatusOr<std::vector<std::vector<int>>> ConnectMesh(const BackendConfig& config,
                                                    const MeshSpec& spec);

// Closes every descriptor of ConnectMesh's result.
void CloseMesh(std::vector<std::vector<int>>* fds);

// The pieces ConnectMesh is built from, for links made one at a time (peer_channel.h).
//
// A listening socket on BindAddress(config) and what to publish for it: "address port token".
struct TcpListener {
  int fd = -1;  // owned by the caller
  uint64_t token = 0;
  std::string published;
};
StatusOr<TcpListener> OpenListener(const BackendConfig& config, const std::string& what,
                                   int backlog, int buffer_bytes);
// What the connecting side sends first: its rank, the channel index, the acceptor's token.
struct TcpHello {
  uint32_t rank;
  uint32_t channel;
  uint64_t token;
};
// Connects to a published "address port token" (retrying until the deadline) and sends
// TcpHello{rank, channel, token}. `whom` names the acceptor in errors ("member 3").
// `cancelled` (may be empty), asked before every retry: a non-OK status ends the dial with it.
StatusOr<int> DialPublished(const std::string& published, uint32_t rank, uint32_t channel,
                            int buffer_bytes, std::chrono::steady_clock::time_point deadline,
                            const std::string& what, const std::string& whom,
                            const std::function<Status()>& cancelled = nullptr);
// Nagle off, non-blocking (what every socket of a mesh gets).
void TuneSocket(int fd);

// Milliseconds until `deadline`, clamped to [0, 2^30]: a poll() timeout.
int RemainingMs(std::chrono::steady_clock::time_point deadline);

}  // namespace hora

#endif  // HORA_COLLECTIVES_TCP_MESH_H_
