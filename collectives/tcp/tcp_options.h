// The tcp backend's knobs, in one place. Most clients leave every field at its default; the
// tests set small values so that the chunked, striped and pipelined paths run on small data.
#ifndef HORA_COLLECTIVES_TCP_TCP_OPTIONS_H_
#define HORA_COLLECTIVES_TCP_TCP_OPTIONS_H_

#include <cstddef>
#include <functional>

#include "common/status.h"

namespace hora {

// The environment variables that set TcpOptions for a job (read through BackendConfig::env,
// the runtime's one view of the environment); each is the field below, in its unit.
inline constexpr char kEnvTcpChannels[] = "HORA_TCP_CHANNELS";
inline constexpr char kEnvTcpPieceBytes[] = "HORA_TCP_PIECE_BYTES";
inline constexpr char kEnvTcpSmallAllreduceBytes[] = "HORA_TCP_SMALL_ALLREDUCE_BYTES";
inline constexpr char kEnvTcpPairDoublingBytes[] = "HORA_TCP_PAIR_DOUBLING_BYTES";
inline constexpr char kEnvTcpSocketBufferBytes[] = "HORA_TCP_SOCKET_BUFFER_BYTES";
inline constexpr char kEnvTcpInflightBytes[] = "HORA_TCP_INFLIGHT_BYTES";
inline constexpr char kEnvTcpSpinUs[] = "HORA_TCP_SPIN_US";

struct TcpOptions {
  // --- Performance ---
  // Connections per pair of members for the collectives (a Send / Recv has one more of its
  // own). A large transfer is cut into pieces that go round-robin over them. Measured on 2
  // netns hosts (docs/benchmarks-cross-host.md): 1 stream 1.8 GB/s, 2 streams 3.1-3.3, more
  // add nothing there; real NICs of 100 Gb/s and up want more.
  int channels = 2;
  // The unit of striping and pipelining: a ring step forwards piece k as soon as it has
  // reduced piece k, while pieces k+1.. are still arriving. Rounded down to whole elements.
  // With the pace below, 128 KiB pieces and a 256 KiB window moved 1, 4 and 64 MiB
  // allreduces between 2 netns hosts 15-25 % faster than 64 KiB and 96 KiB (the data plane's
  // median, alternated runs: docs/benchmarks-cross-host.md "Larger pieces"); 256 KiB pieces
  // with the same window were bistable at 64 MiB. The largest piece: see the next two.
  size_t piece_bytes = 128 << 10;
  // A ring's or a chain's stream is cut into at least this many pieces per block (a ring's
  // per-member block, a chain's whole buffer), down to min_piece_bytes: with too few pieces
  // a ring step cannot overlap. 4 netns hosts x 1 rank, 1 MiB (blocks of 256 KiB): 128 KiB
  // pieces carried 0.68-0.71 GB/s busbw, 64 KiB pieces 0.93-1.08; at 4 x 2 ranks (8
  // processes on 2 cores, blocks of 128 KiB) pieces of 32 KiB lost 10-25 % against 64 KiB.
  // The window below shrinks with the piece (as many pieces in flight). Must agree on every
  // rank.
  size_t pieces_per_block = 4;
  size_t min_piece_bytes = 64 << 10;
  // Allreduce of at most this many bytes: recursive doubling (log2 n rounds, whole buffer
  // each round: latency); above it, the ring (reduce-scatter then allgather, each byte
  // crosses 2(n-1)/n times: bandwidth). Also the ring when count < members.
  size_t small_allreduce_bytes = 64 << 10;
  // With two members, recursive doubling is one exchange of the whole buffer: the bytes the
  // ring moves, in one phase instead of two, but with the reduction after the transfer rather
  // than overlapped with it. It is taken up to this many bytes (the larger of the two
  // thresholds applies). 2 netns hosts x 1 rank, paced (docs/benchmarks-cross-host.md "Paced
  // exchanges"): even with the ring up to 512 KiB, ahead of it at 1 MiB.
  size_t pair_doubling_bytes = 512 << 10;
  // SO_SNDBUF / SO_RCVBUF of every connection. 0: the kernel's autotuning (tcp_rmem /
  // tcp_wmem), which grows a buffer to the bandwidth-delay product; a fixed size turns
  // autotuning off and is capped by net.core.rmem_max / wmem_max.
  int socket_buffer_bytes = 0;
  // Where a member both sends and receives (an exchange with one peer, a ring), at most this
  // many bytes are sent beyond what has arrived (transfer.h SendStream::pace); 0: no limit.
  // Bytes that wait in a socket cost more than bytes not yet sent: on 2 netns hosts a C probe's
  // exchange moved 4.6-4.9 GB/s each way with 128 KiB in flight, 1.6-1.7 without a limit
  // (docs/benchmarks-cross-host.md "Paced exchanges"). One piece; for a stream of smaller
  // pieces (pieces_per_block) the window is as many of those. Two pieces (256 KiB, the default
  // until 2026-12-08) made a 1 MiB allreduce at 2 hosts x 1 rank bistable (half the runs at
  // half the speed) and a 64 MiB one at 4 hosts x 1 rank 25 % slower, with no gain elsewhere
  // (docs/benchmarks-cross-host.md "One piece in flight"). A link whose bandwidth-delay
  // product is larger (100 Gb/s and up, or a long round trip) wants it larger.
  size_t inflight_bytes = 128 << 10;
  // How long a stalled transfer keeps trying (yielding its core between tries) before it
  // sleeps in poll(), whose wake-up costs 25-60 us on the VMs measured; 0: sleep at once.
  int spin_us = 300;
};

// The defaults with what `env` sets (env may be empty: the defaults). INVALID_ARGUMENT
// naming the variable for a value that is not an integer in its range.
StatusOr<TcpOptions> TcpOptionsFromEnv(const std::function<const char*(const char*)>& env);

// OK, or INVALID_ARGUMENT naming the field that is out of range.
Status ValidateTcpOptions(const TcpOptions& options);

}  // namespace hora

#endif  // HORA_COLLECTIVES_TCP_TCP_OPTIONS_H_
