// The hierarchical data-plane backend: a Communicator for a process set that spans several
// hosts with several members on each, composed of three communicators it builds through the
// registry (collectives/registry.h):
//   - host-local: the members of this host ("auto" on one host: shm);
//   - cross-host: the members with this rank's local index, one per host ("auto" for a
//     multi-host set: mpi under an MPI launcher, else tcp, else gloo);
//   - flat: every member of the set, on the cross-host group's backend.
//
// Allreduce (prose in hierarchical_communicator.cc): reduce-scatter inside the host, an
// allreduce of this rank's shard across hosts, allgather inside the host; a large buffer in
// chunks whose phases overlap (HierarchicalOptions::chunk_bytes). Every other
// collective (broadcast, allgatherv, alltoallv, reducescatter, barrier, send/recv) is the
// flat communicator's: none of them reduces its cross-host traffic by being staged in the
// host the way an allreduce does, so a hierarchical version would only add a copy.
//
// Requirements: every host holds the same number of members (>= 2 on some host, >= 2
// hosts); CanServe in hierarchical_backend.cc refuses other sets, with the layout in its
// message. The inner backends must be synchronous (Fence() returns nullptr); creation fails
// with FAILED_PRECONDITION naming the one that is not.
//
// Errors: the first failure of any inner communicator is sticky: it is recorded with the
// phase and inner backend that failed ("hierarchical allreduce, cross-host allreduce (gloo)
// of 1024 elements: ..."), every inner communicator is aborted with it (so members blocked
// on this rank in another group fail too), and every later call returns it. Abort(reason)
// aborts the three inner communicators; how fast a call in progress ends is the inner
// backend's (gloo's own allreduce ends when a peer's connection breaks or at its timeout).
//
// Thread safety: as in communicator.h, one thread drives a communicator; Abort from any.
#ifndef HORA_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_COMMUNICATOR_H_
#define HORA_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_COMMUNICATOR_H_

#include <functional>
#include <memory>
#include <optional>

#include "collectives/communicator.h"
#include "collectives/registry.h"
#include "common/status.h"

namespace hora {

// The registry name.
inline constexpr char kHierarchicalBackend[] = "hierarchical";

// The environment variable that sets HierarchicalOptions::chunk_bytes (read through
// BackendConfig::env), in bytes.
inline constexpr char kEnvHierarchicalChunkBytes[] = "HORA_HIERARCHICAL_CHUNK_BYTES";

struct HierarchicalOptions {
  // --- Performance ---
  // An allreduce of more than this many bytes is cut into chunks of this size (whole
  // elements), and its phases overlap (chunk_pipeline.h): chunk k crosses the hosts while
  // chunk k+1 is reduced in the host and chunk k-1 gathered. 0: never cut, the three phases
  // one after the other. Unset (the default): kAutoChunkBytes where every member has at
  // least two CPUs for each member on its host (the overlap runs two threads per member, and
  // each phase keeps a CPU busy), else 0. When set, it must be the same on every member:
  // creation fails, naming the variable, when the members' values differ.
  std::optional<size_t> chunk_bytes;
};
inline constexpr size_t kAutoChunkBytes = 4 << 20;

// The defaults with what `env` sets (env may be empty); INVALID_ARGUMENT naming the variable
// for a value that is not a whole number of bytes in [0, 2^40].
StatusOr<HierarchicalOptions> HierarchicalOptionsFromEnv(
    const std::function<const char*(const char*)>& env);

// The cross-host groups are built with process_set = kCrossSetBase + config.process_set, so
// that a backend which keys group creation by the set's id (mpi's MPI_Comm_create_group tag)
// does not take them for set 0 (the whole job) or for another set built beside them.
inline constexpr int kCrossSetBase = 1 << 24;

// Collective over the set's members (every member calls it with the same config apart from
// `rank`): builds the host-local, cross-host and flat communicators in that order, each
// bounded by config.timeout, under config.key_prefix + "hier/...". Errors name the inner
// communicator that could not be built.
// REQUIRES: CanServeHierarchical(config) is OK.
StatusOr<std::unique_ptr<Communicator>> CreateHierarchicalCommunicator(const BackendConfig& config);

// OK when the set spans >= 2 hosts, some host holds >= 2 members, and every host holds the
// same number; else why not, with the hosts and their member counts.
Status CanServeHierarchical(const BackendConfig& config);

}  // namespace hora

#endif  // HORA_COLLECTIVES_HIERARCHICAL_HIERARCHICAL_COMMUNICATOR_H_
