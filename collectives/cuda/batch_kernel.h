// The launch of the batched copy kernel (batch_copy.cu), for the host side (batch_copier.cc).
#ifndef HORA_COLLECTIVES_CUDA_BATCH_KERNEL_H_
#define HORA_COLLECTIVES_CUDA_BATCH_KERNEL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "collectives/cuda/span_plan.h"

namespace hora {
namespace cuda {

// What the kernel does to each element. kCopy moves bytes (the table's counts are bytes).
enum class KernelKind {
  kCopy,
  kFloat16,
  kBfloat16,
  kFloat32,
  kFloat64,
  kUint8,
  kInt8,
  kInt16,
  kUint16,
  kInt32,
  kInt64,
};

// Bytes per element as the table counts them for `kind`.
uint32_t KernelElementSize(KernelKind kind);

// Enqueues one launch over `n` spans of `table` (device memory), `chunks` blocks in all (the
// table's first_chunk values are the prefix sums of PlanSpan(..., chunk_bytes).chunks;
// 0 < chunks <= kMaxChunksPerLaunch). Returns the launch's error (cudaGetLastError), not the
// kernel's.
cudaError_t LaunchBatchKernel(KernelKind kind, double scale, const DeviceSpan* table, uint32_t n,
                              uint32_t chunk_bytes, uint64_t chunks, cudaStream_t stream);

}  // namespace cuda
}  // namespace hora

#endif  // HORA_COLLECTIVES_CUDA_BATCH_KERNEL_H_
