// The shared-memory data-plane backend: a Communicator for the members of one process set
// that run on one host, over one POSIX shared-memory segment per communicator
// (collectives/shm/shm_segment.h says how it is named, mapped and removed).
//
// Algorithms (prose in shm_communicator.cc): every collective runs in "steps"; in a step each
// member writes what it contributes into its own staging area in the segment, publishes the
// step number, and reads what it needs from the other members' areas. Staging areas are
// double-buffered by step parity, so a member may run one step ahead of the slowest.
//   - Allreduce of at most small_bytes: one step; every member reduces all contributions in
//     rank order (so every member gets the same bits).
//   - Larger allreduce: in chunks of chunk_bytes / 2, each member reduces its slice of the
//     chunk reading the others' staged data in place, publishes the result, and copies the
//     other slices' results out (reduce-scatter + allgather through shared memory), staging
//     the next chunk before it copies out, so the waits overlap work (software pipelining).
//   - Broadcast, allgatherv, alltoallv, reducescatter, barrier: chunked the same way.
//   - Send/Recv: a byte-stream ring per ordered pair of members; messages are matched per
//     (peer, tag) in order; a message that arrives before its Recv (another tag first, or
//     while this member is blocked in a Send) is buffered on the receiver's heap, so no
//     send/recv order between two members deadlocks on a full ring.
//
// Waiting: a wait spins for spin_us, then sleeps on the member's futex in the segment (a
// process-shared futex), so more members than cores do not collapse and a waiting member
// burns no core. Every wait ends when the awaited peer makes progress, after config.timeout
// (DEADLINE_EXCEEDED naming the peer), when a peer's process is gone or it destroyed its
// communicator (PEER_FAILURE naming it, checked at least every 100 ms while asleep), when any
// member failed or aborted (PEER_FAILURE with that member's reason), or at Abort().
//
// Errors: the first failure is sticky, recorded in the segment so the other members fail at
// once too, and returned by every later call.
// Thread safety: as in communicator.h, one thread drives a communicator; Abort() may be
// called from any thread.
#ifndef HORA_COLLECTIVES_SHM_SHM_COMMUNICATOR_H_
#define HORA_COLLECTIVES_SHM_SHM_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "collectives/communicator.h"
#include "common/kv_store.h"
#include "common/status.h"

namespace hora {

struct ShmConfig {
  int rank = 0;
  int size = 1;
  KvStore* store = nullptr;  // not owned; used only inside CreateShmCommunicator (size > 1)
  // Unique per communicator and the same on every member: namespaces the store key and
  // tags the segment's name.
  std::string key_prefix;
  std::chrono::milliseconds timeout{30000};  // bounds every wait; > 0
  // Bytes of one staging half per member (the chunk of a large collective; half of it for
  // a large allreduce, which pipelines over four quarters); 0 = automatic (1 MiB, less when
  // there are many members). The segment holds 2 halves per member.
  size_t chunk_bytes = 0;
  // Allreduces of at most this many bytes run one-shot; 0 = automatic (32 KiB, at most a
  // half). Test knob as well as a tuning one.
  size_t small_bytes = 0;
  // Bytes of each point-to-point ring (one per ordered pair); 0 = automatic (256 KiB, less
  // when there are many members).
  size_t ring_bytes = 0;
  // Bytes of the zeroed board at the end of the segment (SharedBoard); 0: none.
  size_t board_bytes = 0;
  // How long a wait spins before it sleeps on the futex; < 0 = automatic: 20 us when every
  // member can have a core of this process's CPU set, growing up to 250 us while waits keep
  // ending just after the spin (so two members do not keep waking each other); else 1 us.
  int spin_us = -1;
  // How long a wait then yields its core (sched_yield) before the futex; < 0 = automatic:
  // 200 us when the members outnumber the cores and spin_us is automatic, else none.
  int yield_us = -1;
};

// Collective: every member calls it with the same size, key_prefix and sizes. Blocks until
// every member has mapped the segment, or config.timeout passes (DEADLINE_EXCEEDED naming
// the members that did not attach). UNAVAILABLE when /dev/shm cannot hold the segment or a
// member cannot open it (not one host); INVALID_ARGUMENT for a bad config.
StatusOr<std::unique_ptr<Communicator>> CreateShmCommunicator(const ShmConfig& config);

// Removes /dev/shm/hora-shm.* names whose creating process is gone (only a job killed while
// its members were attaching leaves one). Returns how many were removed. Only safe when every
// job using this /dev/shm runs in this PID namespace: a job in another one (a container, a
// Bazel sandbox) has creator pids that look gone from here, and its live segments would be
// removed. Nothing in Hora calls it; it is for an administrator's cleanup.
int CleanStaleShmSegments();

}  // namespace hora

#endif  // HORA_COLLECTIVES_SHM_SHM_COMMUNICATOR_H_
