#include "common/reduce.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"
#include "common/types.h"

using namespace hora;

namespace {

// Independent oracles: every expected float16 / bfloat16 bit pattern below was computed
// offline, not with Hora's converters, by tests/common/gen_half_tables.py (numpy 1.24.2
// float16 casts and ops; torch 1.13.0 bfloat16 casts and ops; Debian 12), and pasted here.
// Inputs are bit patterns too, so no value passes through the code under test on its way in.

uint32_t Bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
bool IsHalfNan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }
bool IsBfloat16Nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0; }

struct FloatToBits16 {
  uint32_t in;  // float32 bits
  uint16_t out;
};
struct Bits16ToFloat {
  uint16_t in;
  uint32_t out;  // float32 bits
};
struct Reduction16 {
  ReduceOp op;
  uint16_t a, b, out;
};
struct Scale16 {
  uint16_t in;
  double factor;
  uint16_t out;
};

// float32 bits -> float16 bits: numpy astype(float16)
const FloatToBits16 kToHalf[] = {
    {0x3f800000u, 0x3c00},  // 1
    {0xc0200000u, 0xc100},  // -2.5
    {0x477fe000u, 0x7bff},  // half max
    {0x477fefffu, 0x7bff},  // just below the overflow tie
    {0x477ff000u, 0x7c00},  // 65520, the overflow tie -> inf
    {0x49742400u, 0x7c00},  // overflow
    {0xc9742400u, 0xfc00},  // negative overflow
    {0x7f800000u, 0x7c00},  // inf
    {0xff800000u, 0xfc00},  // -inf
    {0x80000000u, 0x8000},  // -0
    {0x38800000u, 0x0400},  // smallest normal
    {0x33800000u, 0x0001},  // smallest subnormal
    {0x33000000u, 0x0000},  // 2^-25, tie between 0 and 2^-24 -> 0 (even)
    {0x33c00000u, 0x0002},  // 1.5 * 2^-24, tie -> 2 * 2^-24 (even)
    {0x33000001u, 0x0001},  // just above the tie -> 2^-24
    {0x32800000u, 0x0000},  // underflow to 0
    {0x387fc000u, 0x03ff},  // largest subnormal
    {0x387fe000u, 0x0400},  // subnormal tie -> smallest normal
    {0x45001000u, 0x6800},  // 2049, tie -> 2048 (even)
    {0x45003000u, 0x6802},  // 2051, tie -> 2052 (even)
    {0x3f801000u, 0x3c00},  // 1 + 2^-11, tie -> 1
    {0x3f803000u, 0x3c02},  // tie -> 1 + 2^-9
    {0x3f801008u, 0x3c01},  // just above the tie -> 1 + 2^-10
    {0x3dcccccdu, 0x2e66},  // 0.1
    {0xbeaaaaabu, 0xb555},  // -1/3
};
// float32 bits -> bfloat16 bits: torch .to(bfloat16)
const FloatToBits16 kToBfloat16[] = {
    {0x3f800000u, 0x3f80},  // 1
    {0xc0400000u, 0xc040},  // -3
    {0x3f808000u, 0x3f80},  // 1 + 2^-8, tie -> 1
    {0x3f818000u, 0x3f82},  // tie -> 1 + 2^-6
    {0x3f808008u, 0x3f81},  // above the tie
    {0x7f7fffffu, 0x7f80},  // FLT_MAX rounds to inf
    {0x7f7f7fffu, 0x7f7f},  // below the tie -> bf16 max
    {0x7f7f8000u, 0x7f80},  // tie above bf16 max (odd) -> inf
    {0x7f800000u, 0x7f80},  // inf
    {0xff800000u, 0xff80},  // -inf
    {0x80000000u, 0x8000},  // -0
    {0x00000001u, 0x0000},  // smallest float denormal -> 0
    {0x00018000u, 0x0002},  // denormal tie, odd -> up
    {0x00008000u, 0x0000},  // denormal tie, even -> down
    {0x3dcccccdu, 0x3dcd},  // 0.1
    {0x71977617u, 0x7197},  // 1.5e30
    {0xbeaaaaabu, 0xbeab},  // -1/3
};
// float16 bits -> float32 bits: numpy astype(float32)
const Bits16ToFloat kFromHalf[] = {
    {0x0001, 0x33800000u}, {0x03ff, 0x387fc000u}, {0x0400, 0x38800000u}, {0x3555, 0x3eaaa000u},
    {0x7bff, 0x477fe000u}, {0x7c00, 0x7f800000u}, {0xfc00, 0xff800000u}, {0x8000, 0x80000000u},
    {0x8001, 0xb3800000u}, {0xc100, 0xc0200000u},
};
// float16 ops: numpy float16 ufuncs
const Reduction16 kHalfOps[] = {
    {ReduceOp::kSum, 0x6800, 0x3c00, 0x6800},  // 2048 + 1: tie -> 2048
    {ReduceOp::kSum, 0x6800, 0x4200, 0x6802},  // 2048 + 3: tie -> 2052
    {ReduceOp::kSum, 0x3c00, 0x1000, 0x3c00},  // 1 + 2^-11: tie -> 1
    {ReduceOp::kSum, 0x3c01, 0x1000, 0x3c02},  // tie -> even
    {ReduceOp::kSum, 0x7bff, 0x4c00, 0x7c00},  // 65504 + 16: tie -> inf
    {ReduceOp::kSum, 0x7bff, 0x4800, 0x7bff},  // 65504 + 8 -> 65504
    {ReduceOp::kSum, 0x7bff, 0x7bff, 0x7c00},  // overflow -> inf
    {ReduceOp::kSum, 0x0001, 0x0001, 0x0002},  // subnormals
    {ReduceOp::kSum, 0x03ff, 0x0001, 0x0400},  // largest subnormal + smallest -> smallest normal
    {ReduceOp::kSum, 0x3e00, 0xc100, 0xbc00},  // 1.5 + -2.5
    {ReduceOp::kAverage, 0x3e00, 0x3800, 0x4000},  // average reduces as sum
    {ReduceOp::kProduct, 0x0001, 0x3800, 0x0000},  // 2^-24 * 0.5: tie -> 0
    {ReduceOp::kProduct, 0x0003, 0x3800, 0x0002},  // 3 * 2^-24 * 0.5: tie -> 2 * 2^-24
    {ReduceOp::kProduct, 0x5c00, 0x5c00, 0x7c00},  // 256 * 256 -> inf
    {ReduceOp::kProduct, 0x3555, 0x4200, 0x3c00},  // 0.333 * 3
    {ReduceOp::kMin, 0x3c00, 0xfc00, 0xfc00},      // min with -inf
    {ReduceOp::kMax, 0x0001, 0x8001, 0x0001},      // max of +-2^-24
    {ReduceOp::kMin, 0x7bff, 0x7c00, 0x7bff},      // min with inf
    {ReduceOp::kMax, 0xc100, 0xc200, 0xc100},      // max(-2.5, -3)
};
// bfloat16 ops: torch bfloat16 ops
const Reduction16 kBfloat16Ops[] = {
    {ReduceOp::kSum, 0x3f80, 0x3b80, 0x3f80},      // 1 + 2^-8: tie -> 1
    {ReduceOp::kSum, 0x3f81, 0x3b80, 0x3f82},      // tie -> even
    {ReduceOp::kSum, 0x4380, 0x3f80, 0x4380},      // 256 + 1: tie -> 256
    {ReduceOp::kSum, 0x4380, 0x4040, 0x4382},      // 256 + 3: tie -> 260
    {ReduceOp::kSum, 0x7f7f, 0x7f7f, 0x7f80},      // overflow -> inf
    {ReduceOp::kSum, 0x0001, 0x0001, 0x0002},      // denormals
    {ReduceOp::kAverage, 0x3fc0, 0x3f00, 0x4000},  // average reduces as sum
    {ReduceOp::kProduct, 0x0001, 0x3f00, 0x0000},  // denormal * 0.5: tie -> 0
    {ReduceOp::kProduct, 0x0003, 0x3f00, 0x0002},  // tie -> 2
    {ReduceOp::kProduct, 0x7f00, 0x4000, 0x7f80},  // overflow -> inf
    {ReduceOp::kProduct, 0x3eab, 0x4040, 0x3f80},  // 0.333 * 3
    {ReduceOp::kMin, 0x3f80, 0xff80, 0xff80},      // min with -inf
    {ReduceOp::kMax, 0xc040, 0xc0a0, 0xc040},      // max(-3, -5)
    {ReduceOp::kMin, 0x4040, 0xc0a0, 0xc0a0},      // min(3, -5)
};
// float16 scaled: numpy float16(float64(x) * factor)
const Scale16 kHalfScales[] = {
    {0x0001, 0.5, 0x0000},
    {0x0003, 0.5, 0x0002},
    {0x7bff, 2, 0x7c00},
    {0x4200, 0.33333333333333331, 0x3c00},
    {0x3c00, 0.33333333333333331, 0x3555},
    {0xc900, 0.33333333333333331, 0xc2ab},
};
// bfloat16 scaled: torch bfloat16(float64(x) * factor)
const Scale16 kBfloat16Scales[] = {
    {0x0001, 0.5, 0x0000},
    {0x0003, 0.5, 0x0002},
    {0x7f7f, 2, 0x7f80},
    {0x4040, 0.33333333333333331, 0x3f80},
    {0x3f80, 0.33333333333333331, 0x3eab},
};

}  // namespace

TEST_CASE("float to float16 rounds to nearest even: ties, denormals, overflow, inf") {
  for (const auto& c : kToHalf) {
    INFO("float bits 0x" << std::hex << c.in);
    CHECK(FloatToHalf(FromBits(c.in)) == c.out);
  }
}

TEST_CASE("float16 to float is exact, denormals and infinities included") {
  for (const auto& c : kFromHalf) {
    INFO("half bits 0x" << std::hex << c.in);
    CHECK(Bits(HalfToFloat(c.in)) == c.out);
  }
}

TEST_CASE("float to bfloat16 rounds to nearest even: ties, denormals, overflow, inf") {
  for (const auto& c : kToBfloat16) {
    INFO("float bits 0x" << std::hex << c.in);
    CHECK(FloatToBfloat16(FromBits(c.in)) == c.out);
  }
  // bfloat16 to float is the top half of the float: every bfloat16 widens exactly.
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    if (IsBfloat16Nan(static_cast<uint16_t>(b))) continue;
    if (Bits(Bfloat16ToFloat(static_cast<uint16_t>(b))) != b << 16) {
      FAIL("bfloat16 0x" << std::hex << b);
    }
  }
}

TEST_CASE("NaN stays NaN both ways, whatever its payload") {
  // Payloads that break naive rounding: all ones carries into the sign bit; a payload only in
  // the low bits truncates to infinity.
  for (uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7fffffffu, 0xffffffffu, 0x7f800001u, 0x7f801fffu,
                       0x7fbfffffu}) {
    INFO("float bits 0x" << std::hex << nan);
    CHECK(IsHalfNan(FloatToHalf(FromBits(nan))));
    CHECK(IsBfloat16Nan(FloatToBfloat16(FromBits(nan))));
    CHECK((FloatToHalf(FromBits(nan)) & 0x8000) == ((nan >> 16) & 0x8000));
  }
  for (uint16_t h : {0x7c01, 0x7e00, 0x7fff, 0xfc01, 0xfe00}) CHECK(std::isnan(HalfToFloat(h)));
  for (uint16_t b : {0x7f81, 0x7fc0, 0x7fff, 0xff81}) CHECK(std::isnan(Bfloat16ToFloat(b)));
  uint16_t inf = 0x7c00, minus_inf = 0xfc00;
  ReduceInto(&inf, &minus_inf, 1, DataType::kFloat16, ReduceOp::kSum);
  CHECK(IsHalfNan(inf));
  uint16_t binf = 0x7f80, bminus_inf = 0xff80;
  ReduceInto(&binf, &bminus_inf, 1, DataType::kBfloat16, ReduceOp::kSum);
  CHECK(IsBfloat16Nan(binf));
}

TEST_CASE("float16 and bfloat16 reductions round once, to nearest even") {
  for (const auto& c : kHalfOps) {
    INFO("float16 op " << ReduceOpName(c.op) << std::hex << " 0x" << c.a << " 0x" << c.b);
    uint16_t d = c.a;
    ReduceInto(&d, &c.b, 1, DataType::kFloat16, c.op);
    CHECK(d == c.out);
  }
  for (const auto& c : kBfloat16Ops) {
    INFO("bfloat16 op " << ReduceOpName(c.op) << std::hex << " 0x" << c.a << " 0x" << c.b);
    uint16_t d = c.a;
    ReduceInto(&d, &c.b, 1, DataType::kBfloat16, c.op);
    CHECK(d == c.out);
  }
  // Past one block of the widening loop (256 elements), every element lands where it belongs.
  std::vector<const Reduction16*> sums;
  for (const auto& c : kHalfOps) {
    if (c.op == ReduceOp::kSum) sums.push_back(&c);
  }
  std::vector<uint16_t> d(1000), s(1000);
  for (size_t i = 0; i < d.size(); ++i) {
    d[i] = sums[i % sums.size()]->a;
    s[i] = sums[i % sums.size()]->b;
  }
  ReduceInto(d.data(), s.data(), d.size(), DataType::kFloat16, ReduceOp::kSum);
  for (size_t i = 0; i < d.size(); ++i) {
    uint16_t want = sums[i % sums.size()]->out;
    if (d[i] != want) FAIL("element " << i << std::hex << ": 0x" << d[i] << " != 0x" << want);
  }
}

TEST_CASE("float16 and bfloat16 scaling rounds to nearest even") {
  for (const auto& c : kHalfScales) {
    INFO("float16 0x" << std::hex << c.in << " * " << c.factor);
    uint16_t d = c.in, o = 0;
    ScaleCopy(&o, &c.in, 1, DataType::kFloat16, c.factor);
    ScaleInPlace(&d, 1, DataType::kFloat16, c.factor);
    CHECK(d == c.out);
    CHECK(o == c.out);
  }
  for (const auto& c : kBfloat16Scales) {
    INFO("bfloat16 0x" << std::hex << c.in << " * " << c.factor);
    uint16_t d = c.in, o = 0;
    ScaleCopy(&o, &c.in, 1, DataType::kBfloat16, c.factor);
    ScaleInPlace(&d, 1, DataType::kBfloat16, c.factor);
    CHECK(d == c.out);
    CHECK(o == c.out);
  }
}

namespace {

// Reference for the types C++ computes natively: plain arithmetic on the element type.
template <typename T>
std::vector<T> Reference(const std::vector<T>& a, const std::vector<T>& b, ReduceOp op) {
  std::vector<T> r(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAverage:
        r[i] = static_cast<T>(a[i] + b[i]);
        break;
      case ReduceOp::kProduct:
        r[i] = static_cast<T>(a[i] * b[i]);
        break;
      case ReduceOp::kMin:
        r[i] = a[i] < b[i] ? a[i] : b[i];
        break;
      case ReduceOp::kMax:
        r[i] = a[i] < b[i] ? b[i] : a[i];
        break;
    }
  }
  return r;
}

template <typename T>
void CheckEveryOp(DataType dtype, const std::vector<T>& a, const std::vector<T>& b) {
  for (int o = 0; o < kNumReduceOps; ++o) {
    ReduceOp op = static_cast<ReduceOp>(o);
    INFO(DataTypeName(dtype) << " " << ReduceOpName(op));
    auto d = a;
    ReduceInto(d.data(), b.data(), d.size(), dtype, op);
    CHECK(d == Reference(a, b, op));
  }
}

}  // namespace

TEST_CASE("ReduceInto applies every op on every native dtype") {
  CheckEveryOp<uint8_t>(DataType::kUint8, {0, 1, 7, 100, 255}, {3, 0, 9, 2, 1});
  CheckEveryOp<int8_t>(DataType::kInt8, {-5, 0, 7, 11, -1}, {3, -9, 7, -2, -1});
  CheckEveryOp<int16_t>(DataType::kInt16, {-500, 0, 7, 1100, -1}, {3, -90, 7, -2, -1});
  CheckEveryOp<uint16_t>(DataType::kUint16, {0, 1, 7, 1000, 255}, {3, 0, 9, 2, 1});
  CheckEveryOp<int32_t>(DataType::kInt32, {1, 5, -3, 1 << 20, 0}, {2, 4, -7, -3, 9});
  CheckEveryOp<int64_t>(DataType::kInt64, {int64_t{1} << 40, -5, 3}, {3, -5, -(int64_t{1} << 33)});
  CheckEveryOp<float>(DataType::kFloat32, {1.5f, -0.25f, 3e38f, 1e-40f}, {2.0f, 8.0f, 2.0f, 0.5f});
  CheckEveryOp<double>(DataType::kFloat64, {1.5, -0.25, 1e308, 1e-310}, {2.0, 8.0, 10.0, 0.5});
}

// int16 and uint16 against results computed by torch (int16) and numpy (uint16): sums and
// products that overflow wrap modulo 2**16, which plain 16-bit arithmetic in C++ would not
// show (it promotes to int; uint16 65535 * 65535 would overflow int).
TEST_CASE("int16 and uint16 wrap on overflow as torch and numpy do") {
  const std::vector<int16_t> a = {30000, -32768, 300, 255, -2, 7}, b = {10000, -1, 300, 2, 3, -7};
  const std::vector<std::pair<ReduceOp, std::vector<int16_t>>> want = {
      {ReduceOp::kSum, {-25536, 32767, 600, 257, 1, 0}},
      {ReduceOp::kAverage, {-25536, 32767, 600, 257, 1, 0}},  // a sum; the caller divides
      {ReduceOp::kProduct, {-23808, -32768, 24464, 510, -6, -49}},
      {ReduceOp::kMin, {10000, -32768, 300, 2, -2, -7}},
      {ReduceOp::kMax, {30000, -1, 300, 255, 3, 7}}};
  for (const auto& [op, expect] : want) {
    INFO("int16 " << ReduceOpName(op));
    auto d = a;
    ReduceInto(d.data(), b.data(), d.size(), DataType::kInt16, op);
    CHECK(d == expect);
  }
  const std::vector<uint16_t> ua = {65535, 40000, 300, 255, 0, 7}, ub = {1, 30000, 300, 257, 9, 3};
  const std::vector<std::pair<ReduceOp, std::vector<uint16_t>>> uwant = {
      {ReduceOp::kSum, {0, 4464, 600, 512, 9, 10}},
      {ReduceOp::kProduct, {65535, 35840, 24464, 65535, 0, 21}},
      {ReduceOp::kMin, {1, 30000, 300, 255, 0, 3}},
      {ReduceOp::kMax, {65535, 40000, 300, 257, 9, 7}}};
  for (const auto& [op, expect] : uwant) {
    INFO("uint16 " << ReduceOpName(op));
    auto d = ua;
    ReduceInto(d.data(), ub.data(), d.size(), DataType::kUint16, op);
    CHECK(d == expect);
  }
  // Scaling (an average's division) rounds toward zero as for the other integers.
  std::vector<int16_t> s = {-25535, 9, 32767}, o(3);
  ScaleCopy(o.data(), s.data(), 3, DataType::kInt16, 1.0 / 3);
  CHECK(o == std::vector<int16_t>{-8511, 3, 10922});
  CHECK(DataTypeSize(DataType::kInt16) == 2);
  CHECK(DataTypeSize(DataType::kUint16) == 2);
  CHECK(std::string(DataTypeName(DataType::kInt16)) == "int16");
  CHECK(std::string(DataTypeName(DataType::kUint16)) == "uint16");
}

TEST_CASE("bool: sum, average and max are or; product and min are and") {
  const std::vector<uint8_t> x = {0, 1, 1, 0}, y = {0, 0, 1, 1};
  const std::vector<uint8_t> any = {0, 1, 1, 1}, all = {0, 0, 1, 0};
  for (int o = 0; o < kNumReduceOps; ++o) {
    ReduceOp op = static_cast<ReduceOp>(o);
    INFO(ReduceOpName(op));
    auto z = x;
    ReduceInto(z.data(), y.data(), 4, DataType::kBool, op);
    bool is_or = op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kMax;
    CHECK(z == (is_or ? any : all));
  }
  // Any non-zero byte is true; the result is 0 or 1.
  std::vector<uint8_t> a = {2, 0, 255}, b = {0, 0, 4};
  ReduceInto(a.data(), b.data(), 3, DataType::kBool, ReduceOp::kSum);
  CHECK(a == std::vector<uint8_t>{1, 0, 1});
}

TEST_CASE("ScaleCopy scales floats; integers round toward zero unless exact") {
  std::vector<float> f = {1.0f, -4.0f};
  ScaleInPlace(f.data(), 2, DataType::kFloat32, 0.5);
  CHECK(f == std::vector<float>{0.5f, -2.0f});
  std::vector<int64_t> i = {7, -7};
  std::vector<int64_t> o(2);
  ScaleCopy(o.data(), i.data(), 2, DataType::kInt64, 0.5);
  CHECK(o == std::vector<int64_t>{3, -3});
  std::vector<uint8_t> bools = {0, 1};
  ScaleInPlace(bools.data(), 2, DataType::kBool, 0.5);
  CHECK(bools == std::vector<uint8_t>{0, 1});
}

TEST_CASE("An average divides by the size: the correctly rounded mean, not times 1/size") {
  // 142 * float(1/3) rounds to 47.33333588; 142 / 3 to 47.33333206 (what torch's t / 3 and
  // DDP give). Horovod's suite compares with threshold 0 at 3 ranks.
  const Postscale avg = FinalPostscale(ReduceOp::kAverage, 1.0, 3);
  CHECK(avg.divisor == 3);
  CHECK(avg.factor == 1.0);
  std::vector<float> f = {142.0f, 150.0f, -188.0f};
  std::vector<float> out(3);
  ScaleCopy(out.data(), f.data(), 3, DataType::kFloat32, avg);
  for (int i = 0; i < 3; ++i) CHECK(out[i] == f[i] / 3.0f);
  CHECK(out[0] != 142.0f * static_cast<float>(1.0 / 3));  // the case that tells them apart
  std::vector<double> d = {0.1 + 0.2, 1e300};
  ScaleInPlace(d.data(), 2, DataType::kFloat64, avg);
  CHECK(d == std::vector<double>{(0.1 + 0.2) / 3, 1e300 / 3});
  std::vector<int32_t> i = {9, -10, 7};
  ScaleInPlace(i.data(), 3, DataType::kInt32, avg);
  CHECK(i == std::vector<int32_t>{3, -3, 2});
  uint16_t h = FloatToHalf(142.0f), ho = 0;
  ScaleCopy(&ho, &h, 1, DataType::kFloat16, avg);
  CHECK(ho == FloatToHalf(142.0f / 3.0f));
  // A postscale of the caller's own folds 1/size into the factor (Horovod's rule).
  const Postscale scaled = FinalPostscale(ReduceOp::kAverage, 0.5, 4);
  CHECK(scaled.divisor == 1);
  CHECK(scaled.factor == 0.125);
  CHECK(FinalPostscale(ReduceOp::kSum, 2.0, 3).AsFactor() == 2.0);
  CHECK(FinalPostscale(ReduceOp::kAverage, 1.0, 1).identity());
}

TEST_CASE("Status and type names") {
  CHECK(Status().ok());
  Status s(Code::kInvalidArgument, "root 5 is out of range");
  CHECK(s.ToString() == "INVALID_ARGUMENT: root 5 is out of range");
  StatusOr<int> v(3);
  REQUIRE(v.ok());
  CHECK(v.value() == 3);
  StatusOr<int> e(s);
  CHECK_FALSE(e.ok());
  CHECK(e.status().code() == Code::kInvalidArgument);
  CHECK(DataTypeSize(DataType::kBfloat16) == 2);
  CHECK(std::string(DataTypeName(DataType::kBool)) == "bool");
  CHECK(IsValidDataType(8));
  CHECK(IsValidDataType(9));   // int16
  CHECK(IsValidDataType(10));  // uint16
  CHECK_FALSE(IsValidDataType(11));
  CHECK(IsValidReduceOp(0));
  CHECK_FALSE(IsValidReduceOp(-1));
  CHECK_FALSE(IsValidReduceOp(kNumReduceOps));
}

TEST_CASE("integer average is exact where the quotient is an integer") {
  std::vector<int32_t> v = {9, 10, -9, 7};
  ScaleInPlace(v.data(), 4, DataType::kInt32, 1.0 / 3);
  CHECK(v == std::vector<int32_t>{3, 3, -3, 2});
}
