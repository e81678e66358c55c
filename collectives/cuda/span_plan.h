// How one span of a batched copy is cut into work for the kernel, computed the same way on the
// host (to size the grid) and on the device (to find a block's work): one function, two sides.
//
// A span of `count` elements of `esize` bytes is
//   - when src and dst are both esize-aligned: a head of elements up to the first W-aligned
//     dst address, a body of W-byte vectors (W = the widest of 16, 8, 4, 2, 1 bytes, at least
//     esize, for which src and dst are equally aligned), and a tail shorter than one vector;
//   - otherwise (an element straddles its natural alignment): elements moved byte by byte.
// The body (or the elements, in the second case) is cut into chunks of `chunk_bytes` (a power
// of two in [kMinChunkBytes, kMaxChunkBytes], the same for every span of a launch); a chunk is
// one thread block's work. The head goes to the span's first chunk, the tail to its last.
#ifndef HORA_COLLECTIVES_CUDA_SPAN_PLAN_H_
#define HORA_COLLECTIVES_CUDA_SPAN_PLAN_H_

#include <cstdint>

#include "collectives/cuda/scale_math.h"  // HORA_HD

namespace hora {
namespace cuda {

constexpr int kThreadsPerBlock = 256;
constexpr uint64_t kMaxChunkBytes = 32768;  // 8 vectors of 16 bytes per thread
constexpr uint64_t kMinChunkBytes = 4096;   // 1 vector of 16 bytes per thread
// The most chunks (blocks) one launch takes: gridDim.x allows 2^31 - 1.
constexpr uint64_t kMaxChunksPerLaunch = uint64_t{1} << 30;

// One span as the kernel reads it from the table (32 bytes).
struct DeviceSpan {
  const unsigned char* src;
  unsigned char* dst;
  uint64_t count;        // elements, > 0
  uint64_t first_chunk;  // the launch's index of this span's first chunk
};

struct SpanPlan {
  uint32_t width;     // W, bytes per vector; 0: elements moved byte by byte
  uint64_t head;      // elements before the first vector
  uint64_t units;     // vectors (width > 0) or elements (width == 0) cut into chunks
  uint64_t tail;      // elements after the last vector
  uint64_t per_chunk; // units per chunk
  uint64_t chunks;    // >= 1 when count > 0
};

HORA_HD SpanPlan PlanSpan(uintptr_t src, uintptr_t dst, uint64_t count, uint32_t esize,
                          uint32_t chunk_bytes) {
  SpanPlan p{0, 0, 0, 0, 1, 0};
  if (count == 0) return p;
  if (src % esize != 0 || dst % esize != 0) {
    p.units = count;
    p.per_chunk = chunk_bytes / esize;
  } else {
    uint32_t w = 16;
    while (w > esize && (src - dst) % w != 0) w /= 2;  // unsigned wrap keeps the residue
    uint64_t head = ((w - dst % w) % w) / esize;
    if (head > count) head = count;
    uint64_t per_vector = w / esize;
    p.width = w;
    p.head = head;
    p.units = (count - head) / per_vector;
    p.tail = count - head - p.units * per_vector;
    p.per_chunk = chunk_bytes / w;
  }
  p.chunks = (p.units + p.per_chunk - 1) / p.per_chunk;
  if (p.chunks == 0) p.chunks = 1;  // a span of only head and tail
  return p;
}

}  // namespace cuda
}  // namespace hora

#endif  // HORA_COLLECTIVES_CUDA_SPAN_PLAN_H_
