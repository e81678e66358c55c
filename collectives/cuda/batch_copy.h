// Batched copies on a CUDA stream, for fusion buffers on the device: one kernel launch copies
// many (src, dst, count) spans of one dtype and multiplies by a scale factor on the way (the
// prescale when packing tensors into the fusion buffer, the postscale when unpacking).
//
// The interface takes the stream as void* so that callers need no CUDA headers.
//
// Thread safety: a BatchCopier is used by one thread at a time (the communicator's executor).
#ifndef HORA_COLLECTIVES_CUDA_BATCH_COPY_H_
#define HORA_COLLECTIVES_CUDA_BATCH_COPY_H_

#include <cstddef>
#include <memory>
#include <vector>

#include "common/status.h"
#include "common/types.h"

namespace hora {
namespace cuda {

struct CopySpan {
  const void* src = nullptr;  // device memory, any alignment
  void* dst = nullptr;        // device memory, any alignment; spans' dst ranges do not overlap
  size_t count = 0;           // elements of the batch's dtype
};

class BatchCopier {
 public:
  // A copier for memory of CUDA device `device` (an ordinal).
  static StatusOr<std::unique_ptr<BatchCopier>> Create(int device);
  virtual ~BatchCopier() = default;

  // Enqueues on `stream` (a cudaStream_t) dst[i] = src[i] * scale for every span, as
  // common/reduce.h's ScaleCopy computes it on the CPU (scale == 1.0 copies the bytes of any
  // dtype). A dtype ScaleCopy cannot scale gives INVALID_ARGUMENT naming it. Returns once
  // enqueued; the span table is the call's own (the caller may reuse `spans` at once).
  virtual Status Copy(const std::vector<CopySpan>& spans, DataType dtype, double scale,
                      void* stream) = 0;
};

// The GPU architectures the kernels were compiled for ("sm_80 sm_90"), for --check-build.
const char* BuiltArchitectures();

}  // namespace cuda
}  // namespace hora

#endif  // HORA_COLLECTIVES_CUDA_BATCH_COPY_H_
