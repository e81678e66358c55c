#include "common/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

namespace hora {

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      exp = 127 - 15 + 1;
      while ((mant & 0x400) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000;
  uint32_t abs = x & 0x7fffffff;
  if (abs >= 0x7f800000) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
  }
  if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // overflow to inf
  if (abs < 0x38800000) {                                              // subnormal or zero in half
    if (abs < 0x33000000) return static_cast<uint16_t>(sign);
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffff) | 0x800000;
    uint32_t shift = 126 - exp;  // value = mant * 2^(exp - 126) in units of 2^-24
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);  // round to nearest even over the dropped bits
    uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t rounded = abs + 0xfff + ((abs >> 13) & 1);  // round to nearest even
  return static_cast<uint16_t>(sign | ((rounded - 0x38000000) >> 13));
}

float Bfloat16ToFloat(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBfloat16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

namespace {

// The type sums and products of T run in: for integers, the unsigned type C++ would promote
// them to (signed overflow is undefined, and int16/uint16 promote to int, where
// 65535 * 65535 overflows); unsigned arithmetic wraps, and the cast back to T keeps the low
// bits: two's complement wrap-around, as torch and numpy compute.
template <typename T, bool = std::is_integral<T>::value>
struct Arith {
  using type = std::make_unsigned_t<decltype(T() + T())>;
};
template <typename T>
struct Arith<T, false> {
  using type = T;
};

template <typename T>
void ReduceTyped(T* __restrict d, const T* __restrict s, size_t n, ReduceOp op) {
  using A = typename Arith<T>::type;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      for (size_t i = 0; i < n; ++i)
        d[i] = static_cast<T>(static_cast<A>(d[i]) + static_cast<A>(s[i]));
      break;
    case ReduceOp::kProduct:
      for (size_t i = 0; i < n; ++i)
        d[i] = static_cast<T>(static_cast<A>(d[i]) * static_cast<A>(s[i]));
      break;
    case ReduceOp::kMin:
      for (size_t i = 0; i < n; ++i) d[i] = std::min(d[i], s[i]);
      break;
    case ReduceOp::kMax:
      for (size_t i = 0; i < n; ++i) d[i] = std::max(d[i], s[i]);
      break;
  }
}

void ReduceBool(uint8_t* d, const uint8_t* s, size_t n, ReduceOp op) {
  bool is_or = op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kMax;
  if (is_or) {
    for (size_t i = 0; i < n; ++i) d[i] = (d[i] | s[i]) ? 1 : 0;
  } else {
    for (size_t i = 0; i < n; ++i) d[i] = (d[i] && s[i]) ? 1 : 0;
  }
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void ReduceHalfLike(uint16_t* d, const uint16_t* s, size_t n, ReduceOp op) {
  constexpr size_t kBlock = 256;
  float a[kBlock], b[kBlock];
  for (size_t off = 0; off < n; off += kBlock) {
    size_t m = std::min(kBlock, n - off);
    for (size_t i = 0; i < m; ++i) {
      a[i] = Load(d[off + i]);
      b[i] = Load(s[off + i]);
    }
    ReduceTyped<float>(a, b, m, op);
    for (size_t i = 0; i < m; ++i) d[off + i] = Store(a[i]);
  }
}

// x * f, or x / f when kDivide (an average's division by the size: correctly rounded).
template <bool kDivide, typename T>
T Apply(T x, T f) {
  return kDivide ? x / f : x * f;
}

// Integers: a result within rounding noise of an integer is that integer (so an average of
// 9 over 3 ranks is 3, not 2.9999999 truncated); otherwise rounds toward zero, like C division.
template <bool kDivide, typename T>
void ScaleCopyInt(T* d, const T* s, size_t n, double factor) {
  for (size_t i = 0; i < n; ++i) {
    double x = Apply<kDivide>(static_cast<double>(s[i]), factor);
    double r = std::nearbyint(x);
    d[i] =
        static_cast<T>(std::fabs(x - r) <= 1e-9 * std::max(1.0, std::fabs(x)) ? r : std::trunc(x));
  }
}

template <bool kDivide, typename T>
void ScaleCopyFloating(T* d, const T* s, size_t n, double factor) {
  const T f = static_cast<T>(factor);
  for (size_t i = 0; i < n; ++i) d[i] = Apply<kDivide>(s[i], f);
}

template <bool kDivide, float (*Load)(uint16_t), uint16_t (*Store)(float)>
void ScaleCopyHalfLike(uint16_t* d, const uint16_t* s, size_t n, double factor) {
  const float f = static_cast<float>(factor);
  for (size_t i = 0; i < n; ++i) d[i] = Store(Apply<kDivide>(Load(s[i]), f));
}

// dst[i] = src[i] * factor, or src[i] / factor when kDivide.
template <bool kDivide>
void ScaleCopyAs(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  switch (dtype) {
    case DataType::kUint8:
      return ScaleCopyInt<kDivide>(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src),
                                   count, factor);
    case DataType::kInt8:
      return ScaleCopyInt<kDivide>(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src),
                                   count, factor);
    case DataType::kInt16:
      return ScaleCopyInt<kDivide>(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src),
                                   count, factor);
    case DataType::kUint16:
      return ScaleCopyInt<kDivide>(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src),
                                   count, factor);
    case DataType::kInt32:
      return ScaleCopyInt<kDivide>(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src),
                                   count, factor);
    case DataType::kInt64:
      return ScaleCopyInt<kDivide>(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src),
                                   count, factor);
    case DataType::kFloat32:
      return ScaleCopyFloating<kDivide>(static_cast<float*>(dst), static_cast<const float*>(src),
                                        count, factor);
    case DataType::kFloat64:
      return ScaleCopyFloating<kDivide>(static_cast<double*>(dst), static_cast<const double*>(src),
                                        count, factor);
    case DataType::kFloat16:
      return ScaleCopyHalfLike<kDivide, HalfToFloat, FloatToHalf>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, factor);
    case DataType::kBfloat16:
      return ScaleCopyHalfLike<kDivide, Bfloat16ToFloat, FloatToBfloat16>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, factor);
    case DataType::kBool:
      return;  // the callers copy bools unchanged
  }
}

}  // namespace

void ReduceInto(void* dst, const void* src, size_t count, DataType dtype, ReduceOp op) {
  switch (dtype) {
    case DataType::kUint8:
      return ReduceTyped(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count, op);
    case DataType::kInt8:
      return ReduceTyped(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), count, op);
    case DataType::kInt16:
      return ReduceTyped(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src), count, op);
    case DataType::kUint16:
      return ReduceTyped(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, op);
    case DataType::kInt32:
      return ReduceTyped(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count, op);
    case DataType::kInt64:
      return ReduceTyped(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count, op);
    case DataType::kFloat32:
      return ReduceTyped(static_cast<float*>(dst), static_cast<const float*>(src), count, op);
    case DataType::kFloat64:
      return ReduceTyped(static_cast<double*>(dst), static_cast<const double*>(src), count, op);
    case DataType::kFloat16:
      return ReduceHalfLike<HalfToFloat, FloatToHalf>(static_cast<uint16_t*>(dst),
                                                      static_cast<const uint16_t*>(src), count, op);
    case DataType::kBfloat16:
      return ReduceHalfLike<Bfloat16ToFloat, FloatToBfloat16>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, op);
    case DataType::kBool:
      return ReduceBool(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count, op);
  }
}

void ScaleCopy(void* dst, const void* src, size_t count, DataType dtype, double factor) {
  if (factor == 1.0 || dtype == DataType::kBool) {
    if (dst != src && count > 0) std::memmove(dst, src, count * DataTypeSize(dtype));
    return;
  }
  ScaleCopyAs<false>(dst, src, count, dtype, factor);
}

void ScaleInPlace(void* buf, size_t count, DataType dtype, double factor) {
  if (factor == 1.0) return;
  ScaleCopy(buf, buf, count, dtype, factor);
}

void ScaleCopy(void* dst, const void* src, size_t count, DataType dtype, const Postscale& post) {
  if (post.divisor <= 1 || post.factor != 1.0 || dtype == DataType::kBool) {
    return ScaleCopy(dst, src, count, dtype, post.AsFactor());
  }
  ScaleCopyAs<true>(dst, src, count, dtype, post.divisor);
}

void ScaleInPlace(void* buf, size_t count, DataType dtype, const Postscale& post) {
  if (post.identity()) return;
  ScaleCopy(buf, buf, count, dtype, post);
}

}  // namespace hora
