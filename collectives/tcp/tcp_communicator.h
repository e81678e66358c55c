// The tcp backend: CPU tensors of a process set on any number of hosts, over TCP connections
// of its own (several per pair of members, bootstrapped through the set's KvStore as
// collectives/tcp_mesh.h describes), built to carry a large allreduce across hosts near what
// the link allows (docs/benchmarks-cross-host.md).
//
// Algorithms (prose in tcp_collectives.cc): allreduce by recursive doubling up to
// TcpOptions::small_allreduce_bytes and by a pipelined ring above it; reducescatter and
// allgatherv by the ring's halves; broadcast by a pipelined chain; alltoallv by every pair at
// once; barrier as a 1-byte allreduce. Every transfer is cut into pieces striped over the
// pair's channels. Send / Recv use one more connection per pair of their own, so they never
// mix with a collective's bytes; a message carries its tag and size, and one that arrives
// before its Recv (another tag first) is held until asked for.
//
// Every dtype; ops sum, min, max, product (average is the runtime's postscale, folded into
// the ring: folds_postscale()). Uneven counts and zero-sized contributions everywhere.
//
// Errors: a peer that closes its connections or dies is PEER_FAILURE naming it (its rank in
// the set and the job, and its host) as soon as the connection ends; a peer that stops
// moving bytes is DEADLINE_EXCEEDED after config.timeout with no progress. A failure is
// sticky and shuts every connection down, so the members waiting on this one learn at once.
//
// Thread safety: as communicator.h: one driving thread; Abort from any.
#ifndef HORA_COLLECTIVES_TCP_TCP_COMMUNICATOR_H_
#define HORA_COLLECTIVES_TCP_TCP_COMMUNICATOR_H_

#include <memory>

#include "collectives/communicator.h"
#include "collectives/registry.h"
#include "collectives/tcp/tcp_options.h"
#include "common/status.h"

namespace hora {

inline constexpr char kTcpBackend[] = "tcp";

// Collective over the set's members, bounded by config.timeout (config.store, key_prefix,
// and the address from collectives/address.h's BindAddress).
StatusOr<std::unique_ptr<Communicator>> CreateTcpCommunicator(
    const BackendConfig& config, const TcpOptions& options = TcpOptions());

}  // namespace hora

#endif  // HORA_COLLECTIVES_TCP_TCP_COMMUNICATOR_H_
