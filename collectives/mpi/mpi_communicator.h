// The MPI data-plane backend: a Communicator over an MPI communicator (Open MPI), for CPU
// buffers, in a job started by mpirun (or horarun --mpi).
//
// Communicators. Process set 0 (every rank) gets a duplicate of MPI_COMM_WORLD
// (MPI_Comm_idup, polled like any wait); any other set gets MPI_Comm_create_group over the
// members' world ranks, collective over the members only, tagged with the set's id so that sets
// created at once from different threads do not mix. MPI_Comm_create_group cannot time out,
// so the members first meet through the KvStore (each sets a key, waits for the others',
// bounded by the timeout); only members that all arrived enter it.
//
// Collectives are MPI's own non-blocking ones, in place where MPI allows: MPI_Iallreduce,
// MPI_Ibcast, MPI_Iallgatherv, MPI_Ialltoallv (bytes), MPI_Ireduce_scatter, MPI_Ibarrier;
// Send/Recv are MPI_Isend/MPI_Irecv with the tag reduced modulo MPI_TAG_UB + 1 (MPI matches
// per (source, tag, communicator) in order, which is the contract). Reductions map as
// collectives/mpi/mpi_reduce.h says (float16 / bfloat16 through Hora's reduce functions).
// Zero-sized work returns without calling MPI (every member knows the sizes).
// Counts: allreduce, broadcast, send and recv split work past MPI's int count into pieces;
// allgatherv, alltoallv and reducescatter take at most INT_MAX elements (bytes) per rank and
// in total (INVALID_ARGUMENT naming the limit).
//
// Waiting. MPI has no timeout, so every wait is a loop of MPI_Test (which also drives MPI's
// progress), yielding the core after a short spin. It ends when the request completes, when
// config.timeout has passed since the call began (DEADLINE_EXCEEDED naming the op and its
// bytes), or at Abort() (its reason). A request that did not complete cannot be taken back
// for a collective (MPI forbids cancelling or freeing one): it is abandoned, the
// communicator is broken (every later call returns the first error at once) and MPI may
// still write that call's output buffer if the peers ever complete it; a receive is
// cancelled. Hora treats any such error as fatal to the job (docs/failure-model.md).
//
// Thread safety: as in communicator.h, one thread drives a communicator; Abort from any.
#ifndef HORA_COLLECTIVES_MPI_MPI_COMMUNICATOR_H_
#define HORA_COLLECTIVES_MPI_MPI_COMMUNICATOR_H_

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/mpi/mpi_environment.h"
#include "common/kv_store.h"
#include "common/status.h"

namespace hora {

struct MpiConfig {
  int rank = 0;                  // this process's rank among the members
  std::vector<int> world_ranks;  // the members' MPI_COMM_WORLD ranks, sorted
  int process_set = 0;           // the set's id: the tag of MPI_Comm_create_group
  // Not owned; used only during CreateMpiCommunicator, for the members' meeting before
  // MPI_Comm_create_group. Required for every set but 0 (which must hold every world rank).
  KvStore* store = nullptr;
  std::string key_prefix;  // namespaces the meeting's keys; the same on every member
  std::chrono::milliseconds timeout{30000};  // bounds every wait; > 0
  MpiEnvLookup env;  // the job's environment (BackendConfig::env), for MPI's first init
};

// Collective over the members (each calls it with the same world_ranks, process_set and
// key_prefix). Initializes MPI on first use (collectives/mpi/mpi_environment.h).
// Errors: INVALID_ARGUMENT (a bad config, or world_ranks[rank] is not this process's MPI
// rank), FAILED_PRECONDITION (MPI's thread level), DEADLINE_EXCEEDED (a member did not
// arrive within the timeout, naming it), INTERNAL (an MPI call failed, with MPI's text).
StatusOr<std::unique_ptr<Communicator>> CreateMpiCommunicator(const MpiConfig& config);

}  // namespace hora

#endif  // HORA_COLLECTIVES_MPI_MPI_COMMUNICATOR_H_
