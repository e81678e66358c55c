// The tcp backend's knobs, in one place. Most clients leave every field at its default; the
// tests set small values so that the chunked, striped and pipelined paths run on small data.
#ifndef HORA_COLLECTIVES_TCP_TCP_OPTIONS_H_
#define HORA_COLLECTIVES_TCP_TCP_OPTIONS_H_

#include <cstddef>

namespace hora {

struct TcpOptions {
  // --- Performance ---
  // Connections per pair of members for the collectives (a Send / Recv has one more of its
  // own). A large transfer is cut into pieces that go round-robin over them. Measured on 2
  // netns hosts (docs/benchmarks-cross-host.md): 1 stream 1.8 GB/s, 2 streams 3.1-3.3, more
  // add nothing there; real NICs of 100 Gb/s and up want more.
  int channels = 2;
  // The unit of striping and pipelining: a ring step forwards piece k as soon as it has
  // reduced piece k, while pieces k+1.. are still arriving. Rounded down to whole elements.
  size_t piece_bytes = 256 << 10;
  // Allreduce of at most this many bytes: recursive doubling (log2 n rounds, whole buffer
  // each round: latency); above it, the ring (reduce-scatter then allgather, each byte
  // crosses 2(n-1)/n times: bandwidth). Also the ring when count < members.
  size_t small_allreduce_bytes = 64 << 10;
  // SO_SNDBUF / SO_RCVBUF of every connection. 0: the kernel's autotuning (tcp_rmem /
  // tcp_wmem), which grows a buffer to the bandwidth-delay product; a fixed size turns
  // autotuning off and is capped by net.core.rmem_max / wmem_max.
  int socket_buffer_bytes = 0;
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_TCP_TCP_OPTIONS_H_
