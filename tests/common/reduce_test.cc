#include "common/reduce.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "common/status.h"
#include "common/types.h"

using namespace hora;

TEST_CASE("half and bfloat16 round trip exactly representable values") {
  for (float v : {0.0f, 1.0f, -2.5f, 65504.0f, 0.000061035156f, 5.9604645e-08f, -1024.0f}) {
    REQUIRE(HalfToFloat(FloatToHalf(v)) == v);
  }
  for (float v : {0.0f, 1.0f, -3.0f, 256.0f, 1.5e30f}) {
    REQUIRE(Bfloat16ToFloat(FloatToBfloat16(v)) == Bfloat16ToFloat(FloatToBfloat16(v)));
    REQUIRE(std::fabs(Bfloat16ToFloat(FloatToBfloat16(v)) - v) <= std::fabs(v) / 128);
  }
  REQUIRE(std::isinf(HalfToFloat(FloatToHalf(1e6f))));
  REQUIRE(std::isnan(HalfToFloat(FloatToHalf(NAN))));
  // 2049 is not representable in half: nearest even is 2048.
  REQUIRE(HalfToFloat(FloatToHalf(2049.0f)) == 2048.0f);
  REQUIRE(HalfToFloat(FloatToHalf(2051.0f)) == 2052.0f);
}

TEST_CASE("ReduceInto applies every op on every dtype") {
  std::vector<int32_t> a = {1, 5, -3}, b = {2, 4, -7};
  auto r = a;
  ReduceInto(r.data(), b.data(), 3, DataType::kInt32, ReduceOp::kSum);
  REQUIRE(r == std::vector<int32_t>{3, 9, -10});
  r = a;
  ReduceInto(r.data(), b.data(), 3, DataType::kInt32, ReduceOp::kMin);
  REQUIRE(r == std::vector<int32_t>{1, 4, -7});
  r = a;
  ReduceInto(r.data(), b.data(), 3, DataType::kInt32, ReduceOp::kMax);
  REQUIRE(r == std::vector<int32_t>{2, 5, -3});
  r = a;
  ReduceInto(r.data(), b.data(), 3, DataType::kInt32, ReduceOp::kProduct);
  REQUIRE(r == std::vector<int32_t>{2, 20, 21});

  std::vector<uint16_t> h = {FloatToHalf(1.5f), FloatToHalf(-2.0f)};
  std::vector<uint16_t> g = {FloatToHalf(0.25f), FloatToHalf(8.0f)};
  ReduceInto(h.data(), g.data(), 2, DataType::kFloat16, ReduceOp::kSum);
  REQUIRE(HalfToFloat(h[0]) == 1.75f);
  REQUIRE(HalfToFloat(h[1]) == 6.0f);

  std::vector<uint16_t> bf = {FloatToBfloat16(3.0f)}, bg = {FloatToBfloat16(-5.0f)};
  ReduceInto(bf.data(), bg.data(), 1, DataType::kBfloat16, ReduceOp::kMin);
  REQUIRE(Bfloat16ToFloat(bf[0]) == -5.0f);

  std::vector<uint8_t> x = {0, 1, 1, 0}, y = {0, 0, 1, 1};
  auto z = x;
  ReduceInto(z.data(), y.data(), 4, DataType::kBool, ReduceOp::kSum);
  REQUIRE(z == std::vector<uint8_t>{0, 1, 1, 1});
  z = x;
  ReduceInto(z.data(), y.data(), 4, DataType::kBool, ReduceOp::kProduct);
  REQUIRE(z == std::vector<uint8_t>{0, 0, 1, 0});
}

TEST_CASE("ScaleCopy scales floats; integers round toward zero unless exact") {
  std::vector<float> f = {1.0f, -4.0f};
  ScaleInPlace(f.data(), 2, DataType::kFloat32, 0.5);
  REQUIRE(f == std::vector<float>{0.5f, -2.0f});
  std::vector<int64_t> i = {7, -7};
  std::vector<int64_t> o(2);
  ScaleCopy(o.data(), i.data(), 2, DataType::kInt64, 0.5);
  REQUIRE(o == std::vector<int64_t>{3, -3});
}

TEST_CASE("Status and type names") {
  REQUIRE(Status().ok());
  Status s(Code::kInvalidArgument, "root 5 is out of range");
  REQUIRE(s.ToString() == "INVALID_ARGUMENT: root 5 is out of range");
  StatusOr<int> v(3);
  REQUIRE(v.ok());
  REQUIRE(v.value() == 3);
  StatusOr<int> e(s);
  REQUIRE_FALSE(e.ok());
  REQUIRE(DataTypeSize(DataType::kBfloat16) == 2);
  REQUIRE(std::string(DataTypeName(DataType::kBool)) == "bool");
  REQUIRE_FALSE(IsValidDataType(9));
  REQUIRE_FALSE(IsValidReduceOp(-1));
}

TEST_CASE("integer average is exact where the quotient is an integer") {
  std::vector<int32_t> v = {9, 10, -9, 7};
  ScaleInPlace(v.data(), 4, DataType::kInt32, 1.0 / 3);
  REQUIRE(v == std::vector<int32_t>{3, 3, -3, 2});
}
