// CUDA tensors on a CPU backend (HORA_GPU_OPERATIONS=shm|gloo|mpi|hierarchical), through
// pinned host memory: what serves a cluster whose GPUs have no NCCL, and several ranks that
// share one GPU (which NCCL refuses).
//
// A StagedCommunicator wraps the CPU backend's communicator (the "host" communicator) and
// exposes the device side the runtime needs: DeviceOps on its own CUDA stream (the runtime
// packs and unpacks fusion buffers there) and a Fence() over that stream. Each collective:
//   1. copies its device input to a pinned staging buffer on the stream, after whatever the
//      stream holds (the packing), and waits on the host for that copy;
//   2. runs the host communicator's collective on the staging buffer;
//   3. queues the copy of the result back to the device on a second stream, which the first
//      then waits for (so unpacking and the Fence come after it).
// Allreduce is cut into at most StagedConfig::chunks chunks of at least min_chunk_bytes: every
// chunk's download is queued at once, so chunk k+1 crosses PCIe while the host reduces chunk
// k, and chunk k goes back while chunk k+1 is reduced. Few chunks: PCIe (about 55 GB/s each
// way on an H200 host) is an order of magnitude faster than a CPU collective (about 5 GB/s
// for shm at 2 ranks), so only the first download and the last upload stay exposed, while
// every chunk costs the CPU backend a call. (On the H200 machine 16 chunks of 4 MiB and 4 of
// 16 MiB gave the same busbw within noise: docs/gpu.md.) Every member cuts the same way (the
// chunking depends only on the count and dtype), so the host collectives match.
//
// Bounded like every communicator: each host wait on a copy ends at the timeout
// (DEADLINE_EXCEEDED) or at Abort(), which also aborts the host communicator.
#ifndef HORA_COLLECTIVES_STAGED_STAGED_COMMUNICATOR_H_
#define HORA_COLLECTIVES_STAGED_STAGED_COMMUNICATOR_H_

#include <chrono>
#include <cstddef>
#include <memory>

#include "collectives/communicator.h"
#include "common/status.h"

namespace hora {

struct StagedConfig {
  int device = 0;  // the CUDA device of the set's tensors on this rank
  std::chrono::milliseconds timeout{30000};
  size_t chunks = 4;                 // allreduce pipelining: chunks per call, at most
  size_t min_chunk_bytes = 1 << 20;  // and bytes per chunk, at least
};

StatusOr<std::unique_ptr<Communicator>> CreateStagedCommunicator(std::unique_ptr<Communicator> host,
                                                                 const StagedConfig& config);

}  // namespace hora

#endif  // HORA_COLLECTIVES_STAGED_STAGED_COMMUNICATOR_H_
