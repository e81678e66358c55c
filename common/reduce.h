// Elementwise math on typed contiguous buffers: reduction of one buffer into another and
// scaling in place. Shared by the fusion buffers (runtime/) and the CPU backends (collectives/).
//
// float16 and bfloat16 are widened to float32 for every operation and rounded back to nearest
// even, so a sum of half-precision values is exact to half precision at each step.
// Integers wrap on overflow (two's complement, as torch's and numpy's integer arithmetic):
// an int16 sum of 30000 and 10000 is -25536.
// For bool, sum and max are logical or, product and min are logical and.
// Average reduces as a sum; the division is the caller's postscale.
#ifndef HORA_COMMON_REDUCE_H_
#define HORA_COMMON_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "common/types.h"

namespace hora {

// The op a reduction actually runs: Average reduces as a sum...
inline ReduceOp ReductionOp(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

// What is applied after a reduction: x * factor / divisor. A plain average divides by the
// number of ranks (the correctly rounded mean, bit for bit what `tensor / size` gives in
// torch, and what DDP computes); multiplying by a rounded 1/size instead can be one unit in
// the last place off at sizes that are not powers of two.
struct Postscale {
  double factor = 1.0;
  int divisor = 1;
  bool identity() const { return factor == 1.0 && divisor == 1; }
  double AsFactor() const { return factor / divisor; }  // for the device kernels
};

// ...and the division by the number of ranks is part of the postscale (folded into the
// factor when the caller gave a postscale of its own, as Horovod does).
inline Postscale FinalPostscale(ReduceOp op, double postscale, int size) {
  if (op != ReduceOp::kAverage) return {postscale, 1};
  if (postscale == 1.0) return {1.0, size};
  return {postscale / size, 1};
}

// dst[i] = op(dst[i], src[i]) for i in [0, count). dst and src may not overlap partially.
void ReduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op);

// buf[i] *= factor. Integer types round toward zero; bool is left unchanged.
// Cheap no-op when factor == 1.
void ScaleInPlace(void* buf, size_t count, DataType dtype, double factor);

// dst[i] = src[i] * factor (a copy that scales on the way; factor == 1 is a memcpy).
void ScaleCopy(void* dst, const void* src, size_t count, DataType dtype, double factor);

// The same with a Postscale: a divisor > 1 divides (integers as with a factor: round toward
// zero); otherwise it is the factor.
void ScaleCopy(void* dst, const void* src, size_t count, DataType dtype, const Postscale& post);
void ScaleInPlace(void* buf, size_t count, DataType dtype, const Postscale& post);

float HalfToFloat(uint16_t h);
uint16_t FloatToHalf(float f);
float Bfloat16ToFloat(uint16_t b);
uint16_t FloatToBfloat16(float f);

}  // namespace hora

#endif  // HORA_COMMON_REDUCE_H_
