// The per-element math and the span plan of the CUDA batched copy (collectives/cuda/
// scale_math.h, span_plan.h), run on the CPU: the element ops must give common/reduce.h's
// ScaleCopy bit for bit on every input (all 2^16 halves and bfloat16s, every 8-bit integer,
// random and special float32/float64/int32/int64 values), and the plan must cover each span's
// elements exactly once. The GPU test (cuda_batch_copy_test) checks the device computes the same.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "collectives/cuda/scale_math.h"
#include "collectives/cuda/span_plan.h"
#include "common/reduce.h"

namespace hora {
namespace cuda {
namespace {

// Scales other than 1 (1 is a byte copy, not the element math).
const double kScales[] = {0.5,
                          1.0 / 3.0,
                          3.0,
                          0.0,
                          -2.0,
                          -0.0,
                          1e-30,
                          1e30,
                          65504.0,
                          std::numeric_limits<double>::infinity(),
                          std::numeric_limits<double>::quiet_NaN()};

template <typename Op>
void CheckAll(DataType dtype, const std::vector<typename Op::Elem>& in, double scale, Op op) {
  using E = typename Op::Elem;
  std::vector<E> want(in.size());
  ScaleCopy(want.data(), in.data(), in.size(), dtype, scale);
  size_t bad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    E got = op(in[i]);
    if (std::memcmp(&got, &want[i], sizeof(E)) != 0) {
      if (++bad <= 5) {
        uint64_t gi = 0, wi = 0, xi = 0;
        std::memcpy(&gi, &got, sizeof(E));
        std::memcpy(&wi, &want[i], sizeof(E));
        std::memcpy(&xi, &in[i], sizeof(E));
        UNSCOPED_INFO(DataTypeName(dtype) << " scale " << scale << " input bits 0x" << std::hex
                                          << xi << ": got 0x" << gi << ", ScaleCopy 0x" << wi);
      }
    }
  }
  CHECK(bad == 0);
}

template <typename T>
std::vector<T> RandomBits(size_t n, const std::vector<T>& specials) {
  std::mt19937_64 rng(12345);
  std::vector<T> v(specials);
  while (v.size() < n) {
    uint64_t r = rng();
    T x;
    std::memcpy(&x, &r, sizeof(T));
    v.push_back(x);
  }
  return v;
}

template <typename T>
std::vector<T> RandomInts(size_t n) {
  std::mt19937_64 rng(777);
  std::vector<T> v = {
      0, 1, static_cast<T>(-1), std::numeric_limits<T>::min(), std::numeric_limits<T>::max(), 3,
      7, 9};
  for (int64_t k = -1000; k <= 1000; ++k) v.push_back(static_cast<T>(k));
  while (v.size() < n) {
    uint64_t r = rng();
    T x;
    std::memcpy(&x, &r, sizeof(T));
    if (v.size() % 2) x = static_cast<T>(x >> (r % (8 * sizeof(T))));  // small magnitudes too
    v.push_back(x);
  }
  return v;
}

std::vector<uint16_t> All16() {
  std::vector<uint16_t> v(65536);
  for (uint32_t i = 0; i < 65536; ++i) v[i] = static_cast<uint16_t>(i);
  return v;
}

TEST_CASE("scale math: float16 and bfloat16 match ScaleCopy on every input") {
  std::vector<uint16_t> all = All16();
  for (double s : kScales) {
    CheckAll(DataType::kFloat16, all, s, math::HalfOp{static_cast<float>(s)});
    CheckAll(DataType::kBfloat16, all, s, math::Bfloat16Op{static_cast<float>(s)});
  }
}

TEST_CASE("scale math: the widening and narrowing match common/reduce.cc on every input") {
  for (uint32_t i = 0; i < 65536; ++i) {
    uint16_t h = static_cast<uint16_t>(i);
    float a = math::HalfToFloat(h), b = HalfToFloat(h);
    REQUIRE(std::memcmp(&a, &b, 4) == 0);
    a = math::Bfloat16ToFloat(h);
    b = Bfloat16ToFloat(h);
    REQUIRE(std::memcmp(&a, &b, 4) == 0);
  }
  std::vector<float> fs = RandomBits<float>(1 << 20, {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f});
  for (float f : fs) {
    REQUIRE(math::FloatToHalf(f) == FloatToHalf(f));
    REQUIRE(math::FloatToBfloat16(f) == FloatToBfloat16(f));
  }
}

TEST_CASE("scale math: float32 and float64 match ScaleCopy, NaN and infinity included") {
  const float finf = std::numeric_limits<float>::infinity();
  std::vector<float> f32 = RandomBits<float>(
      1 << 18,
      {0.0f, -0.0f, finf, -finf, std::numeric_limits<float>::quiet_NaN(),
       -std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::signaling_NaN(),
       std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::min(),
       std::numeric_limits<float>::max()});
  const double dinf = std::numeric_limits<double>::infinity();
  std::vector<double> f64 = RandomBits<double>(
      1 << 18,
      {0.0, -0.0, dinf, -dinf, std::numeric_limits<double>::quiet_NaN(),
       -std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::signaling_NaN(),
       std::numeric_limits<double>::denorm_min(), std::numeric_limits<double>::max()});
  for (double s : kScales) {
    CheckAll(DataType::kFloat32, f32, s, math::Float32Op{static_cast<float>(s)});
    CheckAll(DataType::kFloat64, f64, s, math::Float64Op{s});
  }
}

TEST_CASE("scale math: integers match ScaleCopy, out-of-range results included") {
  std::vector<uint8_t> u8(256);
  std::vector<int8_t> i8(256);
  for (int i = 0; i < 256; ++i) {
    u8[i] = static_cast<uint8_t>(i);
    i8[i] = static_cast<int8_t>(i - 128);
  }
  std::vector<int16_t> i16 = RandomInts<int16_t>(1 << 16);
  std::vector<uint16_t> u16 = RandomInts<uint16_t>(1 << 16);
  std::vector<int32_t> i32 = RandomInts<int32_t>(1 << 16);
  std::vector<int64_t> i64 = RandomInts<int64_t>(1 << 16);
  for (double s : kScales) {
    CheckAll(DataType::kUint8, u8, s, math::IntOp<uint8_t>{s});
    CheckAll(DataType::kInt8, i8, s, math::IntOp<int8_t>{s});
    CheckAll(DataType::kInt16, i16, s, math::IntOp<int16_t>{s});
    CheckAll(DataType::kUint16, u16, s, math::IntOp<uint16_t>{s});
    CheckAll(DataType::kInt32, i32, s, math::IntOp<int32_t>{s});
    CheckAll(DataType::kInt64, i64, s, math::IntOp<int64_t>{s});
  }
}

// Every element of a span lands in exactly one of head, vectors and tail; vectors are
// 16-byte aligned at dst and `shift` bytes past alignment at src; the chunks cover the units.
TEST_CASE("span plan: covers every element once, vectors aligned, for any offsets and counts") {
  const uint64_t counts[] = {0, 1, 2, 3, 7, 15, 16, 17, 1023, 4096, 8193, (1u << 20) + 5};
  for (uint32_t esize : {1u, 2u, 4u, 8u}) {
    for (uintptr_t so = 0; so < 32; ++so) {
      for (uintptr_t dof = 0; dof < 32; ++dof) {
        for (uint64_t count : counts) {
          const uintptr_t src = 0x10000 + so, dst = 0x7000000 + dof;
          const uint32_t chunk_bytes = static_cast<uint32_t>(kMinChunkBytes << ((so + dof) % 4));
          SpanPlan p = PlanSpan(src, dst, count, esize, chunk_bytes);
          INFO("esize " << esize << " src+" << so << " dst+" << dof << " count " << count
                        << " chunk " << chunk_bytes);
          if (count == 0) {
            REQUIRE(p.chunks == 0);
            continue;
          }
          REQUIRE(p.chunks >= 1);
          REQUIRE(p.chunks == std::max<uint64_t>(1, (p.units + p.per_chunk - 1) / p.per_chunk));
          if (src % esize != 0 || dst % esize != 0) {
            REQUIRE_FALSE(p.vectors);
            REQUIRE(p.units == count);
            REQUIRE(p.per_chunk * esize == chunk_bytes);
            REQUIRE(p.head + p.tail == 0);
            continue;
          }
          REQUIRE(p.vectors);
          REQUIRE(p.head + p.units * (16 / esize) + p.tail == count);
          REQUIRE(p.head * esize < 16);
          REQUIRE(p.tail * esize < 16);
          REQUIRE(p.per_chunk * 16 == chunk_bytes);
          REQUIRE(p.shift == (src + p.head * esize) % 16);
          if (p.units > 0) REQUIRE((dst + p.head * esize) % 16 == 0);
          // The head is as short as it can be: only up to dst's first aligned address.
          if (p.head > 0 && p.head < count) REQUIRE(dst % 16 != 0);
        }
      }
    }
  }
}

// The kernel's unaligned-source vectors: bytes [shift, shift + 16) of two aligned words.
TEST_CASE("span plan: ShiftedVector takes the right 16 bytes for every shift") {
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 100; ++trial) {
    unsigned char bytes[32];
    for (auto& b : bytes) b = static_cast<unsigned char>(rng());
    uint32_t lo[4], hi[4];
    std::memcpy(lo, bytes, 16);
    std::memcpy(hi, bytes + 16, 16);
    for (uint32_t shift = 1; shift < 16; ++shift) {
      uint32_t out[4];
      switch (shift / 4) {
        case 0:
          ShiftedVector<0>(lo, hi, shift, out);
          break;
        case 1:
          ShiftedVector<1>(lo, hi, shift, out);
          break;
        case 2:
          ShiftedVector<2>(lo, hi, shift, out);
          break;
        default:
          ShiftedVector<3>(lo, hi, shift, out);
          break;
      }
      INFO("shift " << shift);
      REQUIRE(std::memcmp(out, bytes + shift, 16) == 0);
    }
  }
}

}  // namespace
}  // namespace cuda
}  // namespace hora
