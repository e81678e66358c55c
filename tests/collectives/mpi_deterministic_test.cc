// HORA_DETERMINISTIC's composite (collectives/deterministic.h) on the mpi backend, ranks as
// processes under mpirun: every element of a float32 / float64 / float16 Sum and Average is the
// left-to-right sum of the ranks' values in rank order (computed here from every rank's known
// input), then / n, whatever the piece size the composite cuts the buffer into; the
// reducescatter's slices too.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "collectives/deterministic.h"
#include "common/reduce.h"
#include "tests/collectives/mpi_cases.h"

namespace hora {
namespace testing {
namespace {

// Rank r's values: magnitudes 2^-12 .. 2^12, both signs, as `dtype`.
std::vector<char> Values(int r, size_t count, DataType dtype) {
  std::mt19937 gen(static_cast<uint32_t>(r * 7919 + count));
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<char> out(count * DataTypeSize(dtype));
  for (size_t i = 0; i < count; ++i) {
    const double v = std::ldexp(mantissa(gen), exponent(gen));
    if (dtype == DataType::kFloat64) {
      std::memcpy(&out[i * 8], &v, 8);
    } else if (dtype == DataType::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(&out[i * 4], &f, 4);
    } else {
      const uint16_t h = FloatToHalf(static_cast<float>(v));
      std::memcpy(&out[i * 2], &h, 2);
    }
  }
  return out;
}

// The formula with plain arithmetic (float16 through float32, rounded after each step).
double Get(const std::vector<char>& v, size_t i, DataType dtype) {
  if (dtype == DataType::kFloat64) {
    double d;
    std::memcpy(&d, &v[i * 8], 8);
    return d;
  }
  if (dtype == DataType::kFloat32) {
    float f;
    std::memcpy(&f, &v[i * 4], 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, &v[i * 2], 2);
  return HalfToFloat(h);
}

void Put(std::vector<char>* v, size_t i, DataType dtype, double x) {
  if (dtype == DataType::kFloat64) {
    std::memcpy(&(*v)[i * 8], &x, 8);
  } else if (dtype == DataType::kFloat32) {
    const float f = static_cast<float>(x);
    std::memcpy(&(*v)[i * 4], &f, 4);
  } else {
    const uint16_t h = FloatToHalf(static_cast<float>(x));
    std::memcpy(&(*v)[i * 2], &h, 2);
  }
}

std::vector<char> Expected(int n, size_t count, DataType dtype, bool average) {
  std::vector<std::vector<char>> in;
  for (int r = 0; r < n; ++r) in.push_back(Values(r, count, dtype));
  std::vector<char> out(count * DataTypeSize(dtype));
  for (size_t i = 0; i < count; ++i) {
    if (dtype == DataType::kFloat64) {
      double acc = Get(in[0], i, dtype);
      for (int r = 1; r < n; ++r) acc = acc + Get(in[r], i, dtype);
      Put(&out, i, dtype, average ? acc / n : acc);
    } else {  // float32 arithmetic; float16 rounded back after each step
      float acc = static_cast<float>(Get(in[0], i, dtype));
      auto round = [&](float x) {
        return dtype == DataType::kFloat16 ? HalfToFloat(FloatToHalf(x)) : x;
      };
      for (int r = 1; r < n; ++r) acc = round(acc + static_cast<float>(Get(in[r], i, dtype)));
      Put(&out, i, dtype, average ? round(acc / static_cast<float>(n)) : acc);
    }
  }
  return out;
}

MPI_CASE("deterministic allreduce: the rank-order formula's bits, any piece size") {
  const int n = WorldSize();
  std::vector<char> scratch;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16}) {
    for (bool average : {false, true}) {
      for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}, size_t{300007}}) {
        const std::vector<char> want = Expected(n, count, dtype, average);
        for (size_t piece : {size_t{64}, size_t{4096}, kDeterministicPieceBytes}) {
          std::vector<char> buf = Values(WorldRank(), count, dtype);
          const Postscale post = average ? Postscale{1.0, n} : Postscale{};
          Status s = DeterministicAllreduce(&World(), buf.data(), count, dtype, ReduceOp::kSum,
                                            post, &scratch, piece);
          const std::string label = std::string(DataTypeName(dtype)) +
                                    (average ? " average " : " sum ") + std::to_string(count) +
                                    " elements in pieces of " + std::to_string(piece) + " B";
          if (!s.ok()) return label + ": " + s.ToString();
          if (buf != want) return label + ": not the rank-order formula's bits";
        }
      }
    }
  }
  return "";
}

MPI_CASE("deterministic reducescatter: each rank's slice is the rank-order formula's") {
  const int n = WorldSize();
  std::vector<char> scratch;
  for (DataType dtype : {DataType::kFloat32, DataType::kFloat16}) {
    std::vector<size_t> counts;
    for (int r = 0; r < n; ++r) counts.push_back(1000 + 7 * r);  // uneven
    size_t total = 0, before = 0;
    for (int r = 0; r < n; ++r) total += counts[r];
    for (int r = 0; r < WorldRank(); ++r) before += counts[r];
    const size_t esize = DataTypeSize(dtype);
    const std::vector<char> all = Expected(n, total, dtype, false);
    const std::vector<char> want(all.begin() + before * esize,
                                 all.begin() + (before + counts[WorldRank()]) * esize);
    const std::vector<char> in = Values(WorldRank(), total, dtype);
    std::vector<char> out(counts[WorldRank()] * esize);
    Status s = DeterministicReducescatter(&World(), in.data(), out.data(), counts, dtype,
                                          ReduceOp::kSum, &scratch);
    const std::string label = std::string(DataTypeName(dtype)) + " reducescatter";
    if (!s.ok()) return label + ": " + s.ToString();
    if (out != want) return label + ": not the rank-order formula's bits";
  }
  return "";
}

}  // namespace
}  // namespace testing
}  // namespace hora
