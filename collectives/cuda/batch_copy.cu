// The batched scaled-copy kernel: one block per chunk of a span (span_plan.h), the spans of a
// launch (in its parameters, or a table in device memory) found by binary search over their
// first_chunk.
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "collectives/cuda/batch_copy.h"
#include "collectives/cuda/batch_kernel.h"
#include "collectives/cuda/scale_math.h"
#include "collectives/cuda/span_plan.h"

namespace hora {
namespace cuda {
namespace {

struct CopyOp {
  using Elem = unsigned char;
};

template <typename Op>
__device__ __forceinline__ typename Op::Elem Apply(const Op& op, typename Op::Elem x) {
  if constexpr (std::is_same_v<Op, CopyOp>) {
    return x;
  } else {
    return op(x);
  }
}

// One element at its natural alignment.
template <typename Op>
__device__ __forceinline__ void OneElement(const Op& op, const unsigned char* src,
                                           unsigned char* dst) {
  using E = typename Op::Elem;
  *reinterpret_cast<E*>(dst) = Apply(op, *reinterpret_cast<const E*>(src));
}

// The op on the 16/esize elements of one vector.
template <typename Op>
__device__ __forceinline__ uint4 ApplyVec(const Op& op, uint4 v) {
  if constexpr (std::is_same_v<Op, CopyOp>) {
    return v;
  } else {
    using E = typename Op::Elem;
    constexpr int kPer = 16 / sizeof(E);
    E e[kPer];
    memcpy(e, &v, 16);
#pragma unroll
    for (int k = 0; k < kPer; ++k) e[k] = op(e[k]);
    memcpy(&v, e, 16);
    return v;
  }
}

// Vectors in flight per thread: 8 for plain copies and elements of 4 or 8 bytes; 4 for 2-byte
// and 2 for 1-byte elements, whose vectors are 8 or 16 scaled elements each, already work
// enough per load (unrolled 8 times they were most of the kernels' code: ptxas took 3 of the
// 4 minutes nvcc spent on this file).
template <typename Op>
constexpr int kUnroll = std::is_same_v<Op, CopyOp> || sizeof(typename Op::Elem) >= 4 ? 8
                        : sizeof(typename Op::Elem) == 2                             ? 4
                                                                                     : 2;

// Vectors [begin, end) of a body whose src and dst are both 16-byte aligned.
template <typename Op>
__device__ __forceinline__ void AlignedBody(const Op& op, const uint4* s, uint4* d, uint64_t begin,
                                            uint64_t end) {
  for (uint64_t base = begin + threadIdx.x; base < end;
       base += static_cast<uint64_t>(kUnroll<Op>) * kThreadsPerBlock) {
    uint4 v[kUnroll<Op>];
#pragma unroll
    for (int k = 0; k < kUnroll<Op>; ++k) {
      uint64_t i = base + static_cast<uint64_t>(k) * kThreadsPerBlock;
      // ld.global.cg (L2, coherent), not __ldg's read-only path: src may be dst (in place).
      if (i < end) v[k] = __ldcg(s + i);
    }
#pragma unroll
    for (int k = 0; k < kUnroll<Op>; ++k) {
      uint64_t i = base + static_cast<uint64_t>(k) * kThreadsPerBlock;
      if (i < end) __stcg(d + i, ApplyVec(op, v[k]));
    }
  }
}

// Vectors [begin, end) of a body whose dst is 16-byte aligned and whose src is `shift` bytes
// past the aligned source words `s` (0 < shift < 16, Q = shift / 4): vector i is made of
// words s[i] and s[i + 1], both holding bytes of the span. Neighbouring threads load the
// same words: through L1 (ld.global.ca).
template <typename Op, int Q>
__device__ __forceinline__ void ShiftedBody(const Op& op, const uint4* s, uint4* d, uint32_t shift,
                                            uint64_t begin, uint64_t end) {
  for (uint64_t base = begin + threadIdx.x; base < end;
       base += static_cast<uint64_t>(kUnroll<Op>) * kThreadsPerBlock) {
    uint4 lo[kUnroll<Op>], hi[kUnroll<Op>];
#pragma unroll
    for (int k = 0; k < kUnroll<Op>; ++k) {
      uint64_t i = base + static_cast<uint64_t>(k) * kThreadsPerBlock;
      if (i < end) {
        lo[k] = __ldca(s + i);
        hi[k] = __ldca(s + i + 1);
      }
    }
#pragma unroll
    for (int k = 0; k < kUnroll<Op>; ++k) {
      uint64_t i = base + static_cast<uint64_t>(k) * kThreadsPerBlock;
      if (i < end) {
        const uint32_t a[4] = {lo[k].x, lo[k].y, lo[k].z, lo[k].w};
        const uint32_t b[4] = {hi[k].x, hi[k].y, hi[k].z, hi[k].w};
        uint32_t o[4];
        ShiftedVector<Q>(a, b, shift, o);
        __stcg(d + i, ApplyVec(op, make_uint4(o[0], o[1], o[2], o[3])));
      }
    }
  }
}

template <typename Op>
__device__ __forceinline__ void VectorChunk(const Op& op, const DeviceSpan& s, const SpanPlan& p,
                                            uint64_t chunk) {
  constexpr uint32_t kEsize = sizeof(typename Op::Elem);
  if (chunk == 0 && threadIdx.x < p.head) {
    uint64_t off = uint64_t{threadIdx.x} * kEsize;
    OneElement(op, s.src + off, s.dst + off);
  }
  const uint64_t body = p.head * kEsize;  // byte offset of the first vector
  const uint64_t begin = chunk * p.per_chunk;
  const uint64_t end = begin + p.per_chunk < p.units ? begin + p.per_chunk : p.units;
  if (begin < end) {
    uint4* d = reinterpret_cast<uint4*>(s.dst + body);
    const uint4* w = reinterpret_cast<const uint4*>(s.src + body - p.shift);
    switch (p.shift / 4) {
      case 0:
        if (p.shift == 0) {
          AlignedBody(op, w, d, begin, end);
        } else {
          ShiftedBody<Op, 0>(op, w, d, p.shift, begin, end);
        }
        break;
      case 1:
        ShiftedBody<Op, 1>(op, w, d, p.shift, begin, end);
        break;
      case 2:
        ShiftedBody<Op, 2>(op, w, d, p.shift, begin, end);
        break;
      default:
        ShiftedBody<Op, 3>(op, w, d, p.shift, begin, end);
        break;
    }
  }
  if (chunk + 1 == p.chunks && threadIdx.x < p.tail) {
    uint64_t off = body + p.units * 16 + uint64_t{threadIdx.x} * kEsize;
    OneElement(op, s.src + off, s.dst + off);
  }
}

// Elements that are not at their natural alignment: assembled from and stored as bytes.
template <typename Op>
__device__ __forceinline__ void ByteElementChunk(const Op& op, const DeviceSpan& s,
                                                 const SpanPlan& p, uint64_t chunk) {
  using E = typename Op::Elem;
  constexpr uint32_t kEsize = sizeof(E);
  uint64_t begin = chunk * p.per_chunk;
  uint64_t end = begin + p.per_chunk < p.units ? begin + p.per_chunk : p.units;
  for (uint64_t i = begin + threadIdx.x; i < end; i += kThreadsPerBlock) {
    unsigned char b[kEsize];
#pragma unroll
    for (uint32_t k = 0; k < kEsize; ++k) b[k] = s.src[i * kEsize + k];
    E x;
    memcpy(&x, b, kEsize);
    x = Apply(op, x);
    memcpy(b, &x, kEsize);
#pragma unroll
    for (uint32_t k = 0; k < kEsize; ++k) s.dst[i * kEsize + k] = b[k];
  }
}

// Spans whose first chunks a block reads into shared memory at once (8 KiB) before it
// searches them: one round of loads instead of log2(n) dependent ones from global memory,
// which took as long as a small chunk's copy.
constexpr uint32_t kSharedSpans = 1024;

// The launch's spans: a device table, or (table == nullptr) up to kInlineSpans in the
// parameters, read through the constant cache (__grid_constant__: no per-thread copy).
struct SpanArgs {
  const DeviceSpan* table;
  DeviceSpan inline_spans[kInlineSpans];
};

template <typename Op>
__global__ void __launch_bounds__(kThreadsPerBlock)
    BatchKernel(const __grid_constant__ SpanArgs args, uint32_t n, uint32_t chunk_bytes, Op op) {
  // The span of this block: the last one whose first_chunk <= blockIdx.x.
  const uint64_t block = blockIdx.x;
  const DeviceSpan* __restrict__ table = args.table;
  uint32_t lo = 0, hi = n - 1;
  if (table == nullptr) {
    table = args.inline_spans;
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo + 1) / 2;
      if (table[mid].first_chunk <= block) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
  } else if (n <= kSharedSpans) {
    __shared__ uint64_t firsts[kSharedSpans];
    for (uint32_t i = threadIdx.x; i < n; i += kThreadsPerBlock) {
      firsts[i] = __ldg(&table[i].first_chunk);
    }
    __syncthreads();
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo + 1) / 2;
      if (firsts[mid] <= block) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
  } else {
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo + 1) / 2;
      if (__ldg(&table[mid].first_chunk) <= block) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
  }
  DeviceSpan s;
  s.src = table[lo].src;
  s.dst = table[lo].dst;
  s.count = table[lo].count;
  s.first_chunk = table[lo].first_chunk;
  constexpr uint32_t kEsize = sizeof(typename Op::Elem);
  const SpanPlan p = PlanSpan(reinterpret_cast<uintptr_t>(s.src),
                              reinterpret_cast<uintptr_t>(s.dst), s.count, kEsize, chunk_bytes);
  const uint64_t chunk = block - s.first_chunk;
  if (p.vectors) {
    VectorChunk(op, s, p, chunk);
  } else if constexpr (kEsize > 1) {
    ByteElementChunk(op, s, p, chunk);
  }
}

template <typename Op>
cudaError_t Launch(Op op, const SpanArgs& args, uint32_t n, uint32_t chunk_bytes, uint64_t chunks,
                   cudaStream_t stream) {
  BatchKernel<Op>
      <<<static_cast<unsigned>(chunks), kThreadsPerBlock, 0, stream>>>(args, n, chunk_bytes, op);
  return cudaGetLastError();
}

}  // namespace

uint32_t KernelElementSize(KernelKind kind) {
  switch (kind) {
    case KernelKind::kCopy:
    case KernelKind::kUint8:
    case KernelKind::kInt8:
      return 1;
    case KernelKind::kInt16:
    case KernelKind::kUint16:
    case KernelKind::kFloat16:
    case KernelKind::kBfloat16:
      return 2;
    case KernelKind::kFloat32:
    case KernelKind::kInt32:
      return 4;
    case KernelKind::kFloat64:
    case KernelKind::kInt64:
      return 8;
  }
  return 1;
}

cudaError_t LaunchBatchKernel(KernelKind kind, double scale, const DeviceSpan* table,
                              const DeviceSpan* inline_spans, uint32_t n, uint32_t chunk_bytes,
                              uint64_t chunks, cudaStream_t stream) {
  if (n == 0 || chunks == 0 || chunks > kMaxChunksPerLaunch || chunk_bytes < kMinChunkBytes ||
      chunk_bytes > kMaxChunkBytes || (chunk_bytes & (chunk_bytes - 1)) != 0 ||
      (table == nullptr) == (inline_spans == nullptr) ||
      (inline_spans != nullptr && n > kInlineSpans)) {
    return cudaErrorInvalidValue;
  }
  SpanArgs args;
  args.table = table;
  if (inline_spans != nullptr) memcpy(args.inline_spans, inline_spans, n * sizeof(DeviceSpan));
  const float f = static_cast<float>(scale);
  switch (kind) {
    case KernelKind::kCopy:
      return Launch(CopyOp{}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kFloat16:
      return Launch(math::HalfOp{f}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kBfloat16:
      return Launch(math::Bfloat16Op{f}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kFloat32:
      return Launch(math::Float32Op{f}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kFloat64:
      return Launch(math::Float64Op{scale}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kUint8:
      return Launch(math::IntOp<uint8_t>{scale}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kInt8:
      return Launch(math::IntOp<int8_t>{scale}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kInt16:
      return Launch(math::IntOp<int16_t>{scale}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kUint16:
      return Launch(math::IntOp<uint16_t>{scale}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kInt32:
      return Launch(math::IntOp<int32_t>{scale}, args, n, chunk_bytes, chunks, stream);
    case KernelKind::kInt64:
      return Launch(math::IntOp<int64_t>{scale}, args, n, chunk_bytes, chunks, stream);
  }
  return cudaErrorInvalidValue;
}

const char* BuiltArchitectures() { return HORA_CUDA_ARCHITECTURES; }

}  // namespace cuda
}  // namespace hora
