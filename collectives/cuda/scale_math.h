// The per-element math of the batched scaled copy, written once for the GPU kernels and the
// CPU (so a CPU test can check it against common/reduce.h's ScaleCopy bit for bit without a
// GPU; the GPU test then checks that the device computes the same).
//
// It reproduces what ScaleCopy computes on x86-64 with g++, including what C++ leaves to the
// machine:
//   - float16/bfloat16: widened to float32 exactly, multiplied by (float)factor in float32,
//     rounded back to nearest even with common/reduce.cc's bit routines (its NaN encodings);
//   - float32: x * (float)factor; float64: x * factor; IEEE round to nearest, denormals kept,
//     never fused into a multiply-add;
//   - NaN results as SSE makes them: a NaN operand comes back quiet with its sign and payload
//     (the element's if it is NaN, else the factor's), and a NaN made from numbers (inf * 0)
//     is the x86 default NaN, negative (a GPU would give the positive canonical NaN);
//   - integers: the double product, snapped to an integer within 1e-9 relative, else
//     truncated, then converted as cvttsd2si does: an out-of-range or NaN value becomes
//     INT32_MIN (8- and 32-bit types, then its low bits) or INT64_MIN (int64).
#ifndef HORA_COLLECTIVES_CUDA_SCALE_MATH_H_
#define HORA_COLLECTIVES_CUDA_SCALE_MATH_H_

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define HORA_HD __host__ __device__ __forceinline__
#else
#define HORA_HD inline
#endif

namespace hora {
namespace cuda {
namespace math {

HORA_HD uint32_t FloatBits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
HORA_HD float BitsFloat(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}
HORA_HD uint64_t DoubleBits(double d) {
  uint64_t u;
  memcpy(&u, &d, 8);
  return u;
}
HORA_HD double BitsDouble(uint64_t u) {
  double d;
  memcpy(&d, &u, 8);
  return d;
}
HORA_HD bool IsNan(float f) { return (FloatBits(f) & 0x7fffffffu) > 0x7f800000u; }
HORA_HD bool IsNan(double d) {
  return (DoubleBits(d) & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
}

// a * b in float32 / float64 with x86 SSE's NaN results (see the top of the file).
HORA_HD float MulF32(float a, float b) {
#ifdef __CUDA_ARCH__
  float r = __fmul_rn(a, b);
#else
  float r = a * b;
#endif
  if (!IsNan(r)) return r;
  if (IsNan(a)) return BitsFloat(FloatBits(a) | 0x00400000u);
  if (IsNan(b)) return BitsFloat(FloatBits(b) | 0x00400000u);
  return BitsFloat(0xffc00000u);
}
HORA_HD double MulF64(double a, double b) {
#ifdef __CUDA_ARCH__
  double r = __dmul_rn(a, b);
#else
  double r = a * b;
#endif
  if (!IsNan(r)) return r;
  if (IsNan(a)) return BitsDouble(DoubleBits(a) | 0x0008000000000000ull);
  if (IsNan(b)) return BitsDouble(DoubleBits(b) | 0x0008000000000000ull);
  return BitsDouble(0xfff8000000000000ull);
}

// common/reduce.cc's HalfToFloat / FloatToHalf / Bfloat16ToFloat / FloatToBfloat16.
HORA_HD float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  return BitsFloat(bits);
}

HORA_HD uint16_t FloatToHalf(float f) {
  uint32_t x = FloatBits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {  // subnormal or zero in half
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - exp;  // in [14, 24]
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000u) >> 13));
}

HORA_HD float Bfloat16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

HORA_HD uint16_t FloatToBfloat16(float f) {
  uint32_t x = FloatBits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

// The scaling of one element, per dtype. `Op::Elem` is the storage type.
struct HalfOp {
  using Elem = uint16_t;
  float f;
  HORA_HD uint16_t operator()(uint16_t x) const { return FloatToHalf(MulF32(HalfToFloat(x), f)); }
};
struct Bfloat16Op {
  using Elem = uint16_t;
  float f;
  HORA_HD uint16_t operator()(uint16_t x) const {
    return FloatToBfloat16(MulF32(Bfloat16ToFloat(x), f));
  }
};
struct Float32Op {
  using Elem = float;
  float f;
  HORA_HD float operator()(float x) const { return MulF32(x, f); }
};
struct Float64Op {
  using Elem = double;
  double f;
  HORA_HD double operator()(double x) const { return MulF64(x, f); }
};

HORA_HD double Fabs(double x) { return BitsDouble(DoubleBits(x) & 0x7fffffffffffffffull); }
HORA_HD double Nearbyint(double x) {
#ifdef __CUDA_ARCH__
  return rint(x);  // round half to even, as nearbyint in the default rounding mode
#else
  return std::nearbyint(x);
#endif
}
HORA_HD double Trunc(double x) {
#ifdef __CUDA_ARCH__
  return trunc(x);
#else
  return std::trunc(x);
#endif
}

// cvttsd2si: the truncated value, or the "integer indefinite" when out of range or NaN.
HORA_HD int32_t CvttToInt32(double x) {
  return (x > -2147483649.0 && x < 2147483648.0) ? static_cast<int32_t>(x) : INT32_MIN;
}
HORA_HD int64_t CvttToInt64(double x) {
  return (x >= -9223372036854775808.0 && x < 9223372036854775808.0) ? static_cast<int64_t>(x)
                                                                    : INT64_MIN;
}

template <typename T>
struct IntOp {
  using Elem = T;
  double f;
  HORA_HD T operator()(T s) const {
    double x = MulF64(static_cast<double>(s), f);
    double r = Nearbyint(x);
    double ax = Fabs(x);
    double tol = MulF64(1e-9, ax > 1.0 ? ax : 1.0);  // std::max(1.0, |x|): 1.0 when x is NaN
    double v = Fabs(x - r) <= tol ? r : Trunc(x);
    if (sizeof(T) == 8) return static_cast<T>(CvttToInt64(v));
    return static_cast<T>(static_cast<uint32_t>(CvttToInt32(v)));  // the low bits
  }
};

}  // namespace math
}  // namespace cuda
}  // namespace hora

#endif  // HORA_COLLECTIVES_CUDA_SCALE_MATH_H_
