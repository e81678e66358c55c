// Values for collective tests of every backend: the value each rank contributes per dtype and
// op (small integers, so every reduction over up to 7 ranks is exact and results compare
// byte for byte), the reference reduction, and typed writes. Shared by gloo_test and shm_test.
// int16 and uint16 take the same values times a factor (Wide16) that puts them outside int8's
// range and makes sums over 3 or more ranks and products over 4 or more overflow 16 bits:
// the expected value is the exact result wrapped modulo 2**16, as torch computes.
#ifndef HORA_TESTS_COLLECTIVES_DTYPE_VALUES_H_
#define HORA_TESTS_COLLECTIVES_DTYPE_VALUES_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/reduce.h"
#include "common/types.h"

namespace hora {
namespace testing {

inline constexpr DataType kAllTypes[] = {
    DataType::kUint8,   DataType::kInt8,     DataType::kInt32,   DataType::kInt64,
    DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32, DataType::kFloat64,
    DataType::kBool,    DataType::kInt16,    DataType::kUint16};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                                       ReduceOp::kProduct};

inline bool IsUnsigned(DataType t) {
  return t == DataType::kUint8 || t == DataType::kBool || t == DataType::kUint16;
}

// The factor int16/uint16 values carry: sums of up to 7 ranks reach 28 * 4099 = 114772,
// products 300**3; min/max stay within 16 bits (10 * 3000 at most).
inline double Wide16(DataType t, ReduceOp op) {
  if (t != DataType::kInt16 && t != DataType::kUint16) return 1;
  if (op == ReduceOp::kMin || op == ReduceOp::kMax) return 3000;
  return op == ReduceOp::kProduct ? 300 : 4099;
}

// The value rank r contributes at index i: small integers chosen per op so that the
// reduction over up to 7 ranks is exact in every dtype (sums within [-21, 28], products
// within [-8, 8], bool 0/1).
inline double SmallValue(DataType t, ReduceOp op, size_t i, int r) {
  const size_t k = i + static_cast<size_t>(r) * 5;
  if (t == DataType::kBool) return (k % 3) == 0 ? 1 : ((i % 4 == 0) ? 1 : 0);
  switch (op) {
    case ReduceOp::kProduct:
      if (k % 3 == 0) return 2;
      return (k % 3 == 1 || IsUnsigned(t)) ? 1 : -1;
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return IsUnsigned(t) ? static_cast<double>((i * 7 + r * 13) % 11)
                           : static_cast<double>((i * 7 + r * 13) % 11) - 5;
    default:
      return IsUnsigned(t) ? static_cast<double>(k % 5) : static_cast<double>(k % 7) - 3;
  }
}

inline double Value(DataType t, ReduceOp op, size_t i, int r) {
  const double v = SmallValue(t, op, i, r);
  // Products: only the 2s grow (to 300), so that the 1s and -1s keep the sign pattern.
  if (op == ReduceOp::kProduct) return (v == 2 && Wide16(t, op) != 1) ? Wide16(t, op) : v;
  return v * Wide16(t, op);
}

inline double Fold(DataType t, ReduceOp op, double a, double b) {
  if (t == DataType::kBool) {
    bool x = a != 0, y = b != 0;
    return (op == ReduceOp::kSum || op == ReduceOp::kMax) ? (x || y) : (x && y);
  }
  switch (op) {
    case ReduceOp::kMin:
      return a < b ? a : b;
    case ReduceOp::kMax:
      return a > b ? a : b;
    case ReduceOp::kProduct:
      return a * b;
    default:
      return a + b;
  }
}

inline void Put(DataType t, void* buf, size_t i, double v) {
  switch (t) {
    case DataType::kUint8:
      static_cast<uint8_t*>(buf)[i] = static_cast<uint8_t>(v);
      break;
    case DataType::kInt8:
      static_cast<int8_t*>(buf)[i] = static_cast<int8_t>(v);
      break;
    case DataType::kInt16:  // exact value, wrapped modulo 2**16
      static_cast<int16_t*>(buf)[i] =
          static_cast<int16_t>(static_cast<uint16_t>(static_cast<int64_t>(v)));
      break;
    case DataType::kUint16:
      static_cast<uint16_t*>(buf)[i] = static_cast<uint16_t>(static_cast<int64_t>(v));
      break;
    case DataType::kInt32:
      static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v);
      break;
    case DataType::kInt64:
      static_cast<int64_t*>(buf)[i] = static_cast<int64_t>(v);
      break;
    case DataType::kFloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToHalf(float(v));
      break;
    case DataType::kBfloat16:
      static_cast<uint16_t*>(buf)[i] = FloatToBfloat16(float(v));
      break;
    case DataType::kFloat32:
      static_cast<float*>(buf)[i] = static_cast<float>(v);
      break;
    case DataType::kFloat64:
      static_cast<double*>(buf)[i] = v;
      break;
    case DataType::kBool:
      static_cast<uint8_t*>(buf)[i] = v != 0 ? 1 : 0;
      break;
  }
}

// Fills buf with rank r's contribution; `offset` shifts the index (for reducescatter slices).
inline void FillInput(DataType t, ReduceOp op, int r, void* buf, size_t count, size_t offset = 0) {
  for (size_t i = 0; i < count; ++i) Put(t, buf, i, Value(t, op, i + offset, r));
}

inline void FillExpected(DataType t, ReduceOp op, int size, void* buf, size_t count,
                         size_t offset = 0) {
  for (size_t i = 0; i < count; ++i) {
    double acc = Value(t, op, i + offset, 0);
    for (int r = 1; r < size; ++r) acc = Fold(t, op, acc, Value(t, op, i + offset, r));
    Put(t, buf, i, acc);
  }
}

inline std::string Label(const char* what, DataType t, ReduceOp op, size_t count) {
  return std::string(what) + " " + DataTypeName(t) + " " + ReduceOpName(op) + " x" +
         std::to_string(count);
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_DTYPE_VALUES_H_
