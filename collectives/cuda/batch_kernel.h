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

// Spans a launch can carry in its own parameters (1 KiB): such a launch needs no table in
// device memory, so no copy of it before the kernel and no staging slot.
constexpr uint32_t kInlineSpans = 32;

// Enqueues one launch over `n` spans, `chunks` blocks in all (the spans' first_chunk values
// are the prefix sums of PlanSpan(..., chunk_bytes).chunks; 0 < chunks <= kMaxChunksPerLaunch).
// The spans are either `table` (device memory) or, when n <= kInlineSpans, `inline_spans`
// (host memory, copied into the launch's parameters); the other pointer is null. Returns the
// launch's error (cudaGetLastError), not the kernel's.
cudaError_t LaunchBatchKernel(KernelKind kind, double scale, const DeviceSpan* table,
                              const DeviceSpan* inline_spans, uint32_t n, uint32_t chunk_bytes,
                              uint64_t chunks, cudaStream_t stream);

}  // namespace cuda
}  // namespace hora

#endif  // HORA_COLLECTIVES_CUDA_BATCH_KERNEL_H_
