// The Gloo data-plane backend: a Communicator over Gloo's TCP transport, for CPU buffers.
//
// Bootstrap: every rank publishes its listening address through the KvStore (under
// config.key_prefix) and Gloo connects a full mesh of TCP pairs. The store is needed only
// inside CreateGlooCommunicator.
//
// Algorithms: allreduce is Gloo's ring (reduce-scatter + allgather, pipelined in <= 1 MiB
// segments) with Hora's own reduction math (common/reduce.h), so every DataType and
// sum/min/max/product work. Broadcast is Gloo's binomial tree, allgatherv a ring, alltoallv
// pairwise. Reducescatter is an alltoallv of the per-rank slices followed by a local
// reduction in rank order: each rank sends and receives (size-1)/size of the data once, the
// same volume as a ring reduce-scatter, with one scratch buffer of size*counts[rank] elements.
//
// Send/Recv go over the raw transport in a slot range of their own, matched per (peer, tag)
// in order; zero-byte messages move nothing.
//
// Errors: Gloo's exceptions never leave this layer. A wait that runs past config.timeout is
// DEADLINE_EXCEEDED; a broken connection is PEER_FAILURE. After the first failure the
// communicator is broken: it closes its connections (so peers blocked on it fail fast too)
// and every later call returns that first error at once. Abort() makes every later call fail
// with its reason and wakes Hora's own waits (send, recv, alltoallv, reducescatter); an
// allreduce, broadcast, allgatherv or barrier that Gloo itself is running cannot be woken
// from outside with Debian's libgloo (its tcp pair header is not installed): it ends when a
// peer's connection breaks (a dead or aborting peer closes its sockets) or at the timeout.
//
// Thread safety: as in communicator.h, one thread drives a communicator; Abort from any.
#ifndef HORA_COLLECTIVES_GLOO_GLOO_COMMUNICATOR_H_
#define HORA_COLLECTIVES_GLOO_GLOO_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "common/kv_store.h"
#include "common/status.h"

namespace hora {

struct GlooConfig {
  int rank = 0;
  int size = 1;
  KvStore* store = nullptr;  // not owned; used only during CreateGlooCommunicator
  // Namespaces the store keys (e.g. "gloo/0/"), so several communicators can bootstrap
  // through one store. Must be the same on every rank and unique per communicator.
  std::string key_prefix;
  // IP or hostname of the interface to listen on (port chosen by the OS).
  std::string bind_address = "127.0.0.1";
  // Bounds every wait inside a collective, the rendezvous and the connect. Must be > 0.
  std::chrono::milliseconds timeout{30000};
};

// Collective: every rank of the job calls it with the same size, key_prefix and timeout.
// Blocks until the full mesh is connected or config.timeout passes.
// Errors: INVALID_ARGUMENT (bad config), DEADLINE_EXCEEDED (a rank did not show up),
// UNAVAILABLE (cannot bind or connect), PEER_FAILURE.
StatusOr<std::unique_ptr<Communicator>> CreateGlooCommunicator(const GlooConfig& config);

}  // namespace hora

#endif  // HORA_COLLECTIVES_GLOO_GLOO_COMMUNICATOR_H_
