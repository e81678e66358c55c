// How one span of a batched copy is cut into work for the kernel, computed the same way on the
// host (to size the grid) and on the device (to find a block's work): one function, two sides.
//
// A span of `count` elements of `esize` bytes is
//   - when src and dst are both esize-aligned: a head of elements up to the first 16-byte
//     aligned dst address, a body of 16-byte vectors stored at aligned dst addresses, and a
//     tail shorter than one vector. When src is then 16-byte aligned too (shift == 0), each
//     vector is one aligned load; otherwise each is assembled from the two aligned 16-byte
//     source words it straddles (ShiftedVector);
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
  bool vectors;        // false: elements moved byte by byte
  uint32_t shift;      // (src + head * esize) % 16: the body's source misalignment
  uint64_t head;       // elements before the first vector
  uint64_t units;      // 16-byte vectors (vectors) or elements (!vectors) cut into chunks
  uint64_t tail;       // elements after the last vector
  uint64_t per_chunk;  // units per chunk
  uint64_t chunks;     // >= 1 when count > 0
};

HORA_HD SpanPlan PlanSpan(uintptr_t src, uintptr_t dst, uint64_t count, uint32_t esize,
                          uint32_t chunk_bytes) {
  SpanPlan p{false, 0, 0, 0, 0, 1, 0};
  if (count == 0) return p;
  if (src % esize != 0 || dst % esize != 0) {
    p.units = count;
    p.per_chunk = chunk_bytes / esize;
  } else {
    uint64_t head = ((16 - dst % 16) % 16) / esize;
    if (head > count) head = count;
    p.vectors = true;
    p.head = head;
    p.shift = static_cast<uint32_t>((src + head * esize) % 16);
    p.units = (count - head) * esize / 16;
    p.tail = count - head - p.units * (16 / esize);
    p.per_chunk = chunk_bytes / 16;
  }
  p.chunks = (p.units + p.per_chunk - 1) / p.per_chunk;
  if (p.chunks == 0) p.chunks = 1;  // a span of only head and tail
  return p;
}

// Bytes [shift, shift + 16) of the 32 bytes lo || hi (little-endian 32-bit words), for
// 0 < shift < 16: the 16 source bytes of one dst-aligned vector, from the two aligned source
// words that hold them. Q = shift / 4 (a template argument, so the words stay in registers).
HORA_HD uint32_t FunnelRight(uint32_t lo, uint32_t hi, uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __funnelshift_r(lo, hi, bits);
#else
  return bits == 0 ? lo : (lo >> bits) | (hi << (32 - bits));
#endif
}

template <int Q>
HORA_HD void ShiftedVector(const uint32_t lo[4], const uint32_t hi[4], uint32_t byte_shift,
                           uint32_t out[4]) {
  const uint32_t c[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
  const uint32_t bits = 8 * (byte_shift % 4);
  for (int k = 0; k < 4; ++k) out[k] = FunnelRight(c[Q + k], c[Q + k + 1], bits);
}

}  // namespace cuda
}  // namespace hora

#endif  // HORA_COLLECTIVES_CUDA_SPAN_PLAN_H_
