// The schedule of a hierarchical allreduce cut into chunks, with its phases overlapped: the
// cross-host allreduce of chunk k runs on a helper thread while the calling thread runs the
// host-local reducescatter of chunk k+1 and the host-local allgather of chunk k-1. A large
// allreduce then costs about its slowest phase, not the sum of its three.
//
// Order, the same on every member whatever the timing (each phase is a collective, so the
// members of a group must call them in one order):
//   calling thread:  scatter(0), scatter(1), [cross(0) done], gather(0), scatter(2),
//                    [cross(1) done], gather(1), ..., [cross(n-1) done], gather(n-1)
//   helper thread:   [scatter(0) done], cross(0), [scatter(1) done], cross(1), ...
// No cycle of waits: cross(k) on one host needs scatter(k) on the others, which each calling
// thread runs before it waits for any cross(j >= k-1), and cross(k-2) runs before cross(k)
// on every helper.
//
// Errors: the first failing phase ends the pipeline; the other thread stops at its next
// wait. A phase blocked in a collective is not interrupted here: the caller's phase
// functions abort the inner communicators on failure (HierarchicalCommunicator::Check does),
// so a blocked phase fails soon after. RunChunkPipeline returns only once the helper thread
// has finished: no phase touches the caller's buffers after it returns.
#ifndef HORA_COLLECTIVES_HIERARCHICAL_CHUNK_PIPELINE_H_
#define HORA_COLLECTIVES_HIERARCHICAL_CHUNK_PIPELINE_H_

#include <cstddef>
#include <functional>

#include "common/status.h"

namespace hora {

struct ChunkPhases {
  std::function<Status(size_t chunk)> scatter;  // host-local, on the calling thread
  std::function<Status(size_t chunk)> cross;    // cross-host, on the helper thread
  std::function<Status(size_t chunk)> gather;   // host-local, on the calling thread
};

// Runs chunks 0 .. chunks-1 through the three phases in the order above; the first error
// (the calling thread's if both failed). REQUIRES: chunks >= 1.
Status RunChunkPipeline(size_t chunks, const ChunkPhases& phases);

}  // namespace hora

#endif  // HORA_COLLECTIVES_HIERARCHICAL_CHUNK_PIPELINE_H_
