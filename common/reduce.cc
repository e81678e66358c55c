#include "common/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "common/copy.h"

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

// Integers: a result within rounding noise of an integer is that integer (so an average of
// 9 over 3 ranks is 3, not 2.9999999 truncated); otherwise rounds toward zero, like C division.
template <typename T, bool kDivide = false>
void ScaleCopyTyped(T* d, const T* s, size_t n, double factor) {
  for (size_t i = 0; i < n; ++i) {
    double x = kDivide ? static_cast<double>(s[i]) / factor : static_cast<double>(s[i]) * factor;
    double r = std::nearbyint(x);
    d[i] =
        static_cast<T>(std::fabs(x - r) <= 1e-9 * std::max(1.0, std::fabs(x)) ? r : std::trunc(x));
  }
}

void ScaleCopyDouble(double* d, const double* s, size_t n, double factor) {
  for (size_t i = 0; i < n; ++i) d[i] = s[i] * factor;
}

void ScaleCopyFloat(float* __restrict d, const float* __restrict s, size_t n, double factor) {
  float f = static_cast<float>(factor);
  for (size_t i = 0; i < n; ++i) d[i] = s[i] * f;
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void ScaleCopyHalfLike(uint16_t* d, const uint16_t* s, size_t n, double factor) {
  float f = static_cast<float>(factor);
  for (size_t i = 0; i < n; ++i) d[i] = Store(Load(s[i]) * f);
}

// dst[i] = src[i] / divisor, divisor > 1.
template <typename T>
void DivideCopyFloating(T* d, const T* s, size_t n, T divisor) {
  for (size_t i = 0; i < n; ++i) d[i] = s[i] / divisor;
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void DivideCopyHalfLike(uint16_t* d, const uint16_t* s, size_t n, float divisor) {
  for (size_t i = 0; i < n; ++i) d[i] = Store(Load(s[i]) / divisor);
}

void DivideCopy(void* dst, const void* src, size_t count, DataType dtype, int divisor) {
  const double q = divisor;
  switch (dtype) {
    case DataType::kUint8:
      return ScaleCopyTyped<uint8_t, true>(static_cast<uint8_t*>(dst),
                                           static_cast<const uint8_t*>(src), count, q);
    case DataType::kInt8:
      return ScaleCopyTyped<int8_t, true>(static_cast<int8_t*>(dst),
                                          static_cast<const int8_t*>(src), count, q);
    case DataType::kInt16:
      return ScaleCopyTyped<int16_t, true>(static_cast<int16_t*>(dst),
                                           static_cast<const int16_t*>(src), count, q);
    case DataType::kUint16:
      return ScaleCopyTyped<uint16_t, true>(static_cast<uint16_t*>(dst),
                                            static_cast<const uint16_t*>(src), count, q);
    case DataType::kInt32:
      return ScaleCopyTyped<int32_t, true>(static_cast<int32_t*>(dst),
                                           static_cast<const int32_t*>(src), count, q);
    case DataType::kInt64:
      return ScaleCopyTyped<int64_t, true>(static_cast<int64_t*>(dst),
                                           static_cast<const int64_t*>(src), count, q);
    case DataType::kFloat32:
      return DivideCopyFloating(static_cast<float*>(dst), static_cast<const float*>(src), count,
                                static_cast<float>(divisor));
    case DataType::kFloat64:
      return DivideCopyFloating(static_cast<double*>(dst), static_cast<const double*>(src), count,
                                q);
    case DataType::kFloat16:
      return DivideCopyHalfLike<HalfToFloat, FloatToHalf>(static_cast<uint16_t*>(dst),
                                                          static_cast<const uint16_t*>(src), count,
                                                          static_cast<float>(divisor));
    case DataType::kBfloat16:
      return DivideCopyHalfLike<Bfloat16ToFloat, FloatToBfloat16>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count,
          static_cast<float>(divisor));
    case DataType::kBool:
      if (dst != src && count > 0) MoveBytes(dst, src, count);
      return;
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
    if (dst != src && count > 0) MoveBytes(dst, src, count * DataTypeSize(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kUint8:
      return ScaleCopyTyped(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), count,
                            factor);
    case DataType::kInt8:
      return ScaleCopyTyped(static_cast<int8_t*>(dst), static_cast<const int8_t*>(src), count,
                            factor);
    case DataType::kInt16:
      return ScaleCopyTyped(static_cast<int16_t*>(dst), static_cast<const int16_t*>(src), count,
                            factor);
    case DataType::kUint16:
      return ScaleCopyTyped(static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count,
                            factor);
    case DataType::kInt32:
      return ScaleCopyTyped(static_cast<int32_t*>(dst), static_cast<const int32_t*>(src), count,
                            factor);
    case DataType::kInt64:
      return ScaleCopyTyped(static_cast<int64_t*>(dst), static_cast<const int64_t*>(src), count,
                            factor);
    case DataType::kFloat32:
      return ScaleCopyFloat(static_cast<float*>(dst), static_cast<const float*>(src), count,
                            factor);
    case DataType::kFloat64:
      return ScaleCopyDouble(static_cast<double*>(dst), static_cast<const double*>(src), count,
                             factor);
    case DataType::kFloat16:
      return ScaleCopyHalfLike<HalfToFloat, FloatToHalf>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, factor);
    case DataType::kBfloat16:
      return ScaleCopyHalfLike<Bfloat16ToFloat, FloatToBfloat16>(
          static_cast<uint16_t*>(dst), static_cast<const uint16_t*>(src), count, factor);
    case DataType::kBool:
      return;
  }
}

void ScaleInPlace(void* buf, size_t count, DataType dtype, double factor) {
  if (factor == 1.0) return;
  ScaleCopy(buf, buf, count, dtype, factor);
}

void ScaleCopy(void* dst, const void* src, size_t count, DataType dtype, const Postscale& post) {
  if (post.divisor > 1) {
    if (post.factor != 1.0) return ScaleCopy(dst, src, count, dtype, post.AsFactor());
    return DivideCopy(dst, src, count, dtype, post.divisor);
  }
  ScaleCopy(dst, src, count, dtype, post.factor);
}

void ScaleInPlace(void* buf, size_t count, DataType dtype, const Postscale& post) {
  if (post.identity()) return;
  ScaleCopy(buf, buf, count, dtype, post);
}

}  // namespace hora
