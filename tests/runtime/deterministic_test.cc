// HORA_DETERMINISTIC (collectives/deterministic.h): engines as threads at 3 and 4 ranks, random
// float32 / float64 / float16 / bfloat16 tensors of odd sizes (values of many magnitudes, so
// the sums round), Sum and Average, submitted as a group and one at a time, each several
// times (the first small ones are reduced by the coordinator, later ones by the steady path).
// With the option on, every rank's every result equals the formula computed here (rank 0's
// value, then + rank 1's, ... in rank order, each + rounded to the type, then / n) whatever
// the backend (shm, gloo on one host, gloo and hierarchical on two hosts) and the fusion
// threshold (0 and 64 MiB). With it off the same runs give differing bits somewhere, so the
// comparison can fail.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/reduce.h"
#include "tests/runtime/engine_threads.h"
#include "tests/runtime/steady_harness.h"

namespace hora {
namespace {

using testing::RunRanks;
using testing::WaitBound;

constexpr int kIterations = 5;  // past the steady path's warm-up
constexpr int64_t kBigFusion = int64_t{64} << 20;

struct Tensor {
  DataType dtype;
  ReduceOp op;
  size_t count;
};

std::vector<Tensor> Tensors() {
  std::vector<Tensor> ts;
  for (DataType d :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBfloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage}) {
      for (size_t n : {1, 7, 1001, 4099, 30011, 300007}) ts.push_back({d, op, n});
    }
  }
  return ts;
}

// Rank r's input of tensor t: magnitudes from 2^-12 to 2^12 and both signs, so that adding
// them in another order gives other bits.
std::vector<char> Input(int r, size_t t, const Tensor& tensor) {
  std::mt19937 gen(static_cast<uint32_t>(r * 7919 + t * 104729 + 1));
  std::uniform_real_distribution<double> mantissa(-1.0, 1.0);
  std::uniform_int_distribution<int> exponent(-12, 12);
  const size_t esize = DataTypeSize(tensor.dtype);
  std::vector<char> out(tensor.count * esize);
  for (size_t i = 0; i < tensor.count; ++i) {
    const double v = std::ldexp(mantissa(gen), exponent(gen));
    char* p = out.data() + i * esize;
    if (tensor.dtype == DataType::kFloat64) {
      std::memcpy(p, &v, 8);
    } else if (tensor.dtype == DataType::kFloat32) {
      const float f = static_cast<float>(v);
      std::memcpy(p, &f, 4);
    } else {
      const float f = static_cast<float>(v);
      const uint16_t h = tensor.dtype == DataType::kFloat16 ? FloatToHalf(f) : FloatToBfloat16(f);
      std::memcpy(p, &h, 2);
    }
  }
  return out;
}

// The documented formula, written out with plain arithmetic: the left-to-right sum in rank
// order, rounded to the type after each addition (half types through float32), then / n.
template <typename T>
std::vector<char> Native(const std::vector<std::vector<char>>& in, size_t count, bool average) {
  const int n = static_cast<int>(in.size());
  std::vector<char> out(count * sizeof(T));
  for (size_t i = 0; i < count; ++i) {
    T acc, x;
    std::memcpy(&acc, in[0].data() + i * sizeof(T), sizeof(T));
    for (int r = 1; r < n; ++r) {
      std::memcpy(&x, in[r].data() + i * sizeof(T), sizeof(T));
      acc = acc + x;
    }
    if (average) acc = acc / static_cast<T>(n);
    std::memcpy(out.data() + i * sizeof(T), &acc, sizeof(T));
  }
  return out;
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
std::vector<char> NativeHalf(const std::vector<std::vector<char>>& in, size_t count, bool average) {
  const int n = static_cast<int>(in.size());
  std::vector<char> out(count * 2);
  for (size_t i = 0; i < count; ++i) {
    uint16_t acc, x;
    std::memcpy(&acc, in[0].data() + i * 2, 2);
    for (int r = 1; r < n; ++r) {
      std::memcpy(&x, in[r].data() + i * 2, 2);
      acc = Store(Load(acc) + Load(x));
    }
    if (average) acc = Store(Load(acc) / static_cast<float>(n));
    std::memcpy(out.data() + i * 2, &acc, 2);
  }
  return out;
}

std::vector<char> Expected(int ranks, size_t t, const Tensor& tensor) {
  std::vector<std::vector<char>> in;
  for (int r = 0; r < ranks; ++r) in.push_back(Input(r, t, tensor));
  const bool avg = tensor.op == ReduceOp::kAverage;
  switch (tensor.dtype) {
    case DataType::kFloat32:
      return Native<float>(in, tensor.count, avg);
    case DataType::kFloat64:
      return Native<double>(in, tensor.count, avg);
    case DataType::kFloat16:
      return NativeHalf<HalfToFloat, FloatToHalf>(in, tensor.count, avg);
    default:
      return NativeHalf<Bfloat16ToFloat, FloatToBfloat16>(in, tensor.count, avg);
  }
}

struct Config {
  int ranks;
  std::string backend;  // HORA_CPU_OPERATIONS
  bool two_hosts;       // hosts by rank parity, else all on one
  int64_t fusion;
  bool deterministic;
  std::string Describe() const {
    return std::to_string(ranks) + " ranks, " + backend + (two_hosts ? " on 2 hosts" : "") +
           ", fusion " + std::to_string(fusion) + (deterministic ? ", deterministic" : "");
  }
};

// Results of one job, the same layout on every rank: [mode][iteration][tensor], mode 0 =
// the tensors enqueued together, 1 = each waited for before the next.
using Results = std::vector<std::vector<std::vector<std::vector<char>>>>;

std::string RunOne(Engine& e, const std::string& name, const Tensor& tensor,
                   const std::vector<char>& in, std::vector<char>* out, int64_t* handle) {
  TensorSpec spec;
  spec.name = name;
  spec.dtype = tensor.dtype;
  spec.op = tensor.op;
  spec.shape = {static_cast<int64_t>(tensor.count)};
  out->assign(in.size(), 0);
  auto h = e.Enqueue(spec, in.data(), out->data());
  if (!h.ok()) return name + ": " + h.status().ToString();
  *handle = h.value();
  return "";
}

std::string Finish(Engine& e, const std::string& name, int64_t handle) {
  Status s = e.Wait(handle, WaitBound());
  (void)e.Release(handle);
  return s.ok() ? "" : name + ": " + s.ToString();
}

// steady_fast: rank 0's operations on the steady path (which must have run some of them).
std::vector<Results> RunJob(const Config& c, int64_t* steady_fast = nullptr) {
  const std::vector<Tensor> tensors = Tensors();
  std::vector<Results> results(c.ranks);
  auto errors = RunRanks(
      c.ranks,
      [&](int r, Engine& e) -> std::string {
        std::vector<std::vector<char>> inputs;
        for (size_t t = 0; t < tensors.size(); ++t) inputs.push_back(Input(r, t, tensors[t]));
        Results& mine = results[r];
        mine.assign(2, std::vector<std::vector<std::vector<char>>>(
                           kIterations, std::vector<std::vector<char>>(tensors.size())));
        for (int i = 0; i < kIterations; ++i) {
          std::vector<int64_t> handles(tensors.size());
          for (size_t t = 0; t < tensors.size(); ++t) {
            const std::string name = "grouped." + std::to_string(t);
            std::string err = RunOne(e, name, tensors[t], inputs[t], &mine[0][i][t], &handles[t]);
            if (!err.empty()) return err;
          }
          for (size_t t = 0; t < tensors.size(); ++t) {
            std::string err = Finish(e, "grouped." + std::to_string(t), handles[t]);
            if (!err.empty()) return err;
          }
          for (size_t t = 0; t < tensors.size(); ++t) {
            const std::string name = "single." + std::to_string(t);
            std::string err = RunOne(e, name, tensors[t], inputs[t], &mine[1][i][t], &handles[t]);
            if (err.empty()) err = Finish(e, name, handles[t]);
            if (!err.empty()) return err;
          }
        }
        auto stats = e.Steady(kGlobalProcessSet);
        if (r == 0 && steady_fast != nullptr && stats.ok()) *steady_fast = stats.value().fast;
        return "";
      },
      [&](Options* o) {
        o->hostname = c.two_hosts ? "host" + std::to_string(o->rank % 2) : "onehost";
        o->cpu_operations = c.backend;
        o->fusion_threshold_bytes = c.fusion;
        o->deterministic = c.deterministic;
      });
  INFO(c.Describe());
  testing::CheckEveryRank(errors);
  for (const std::string& err : errors) {
    if (!err.empty()) return {};  // reported
  }
  return results;
}

std::vector<Config> Configs(int ranks, bool deterministic) {
  std::vector<Config> cs;
  for (int64_t fusion : {int64_t{0}, kBigFusion}) {
    cs.push_back({ranks, "shm", false, fusion, deterministic});
    cs.push_back({ranks, "gloo", false, fusion, deterministic});
    cs.push_back({ranks, "gloo", true, fusion, deterministic});
    // Hierarchical needs as many ranks on every host.
    if (ranks % 2 == 0) cs.push_back({ranks, "hierarchical", true, fusion, deterministic});
  }
  return cs;
}

TEST_CASE("deterministic: the rank-order formula's bits on every path, backend and fusion") {
  const std::vector<Tensor> tensors = Tensors();
  for (int ranks : {3, 4}) {
    std::vector<std::vector<char>> expected;
    for (size_t t = 0; t < tensors.size(); ++t) expected.push_back(Expected(ranks, t, tensors[t]));
    for (const Config& c : Configs(ranks, true)) {
      int64_t steady_fast = 0;
      std::vector<Results> results = RunJob(c, &steady_fast);
      if (results.empty()) continue;
      INFO(c.Describe() << ": " << steady_fast << " operations on the steady path");
      CHECK(steady_fast > 0);
      int wrong = 0;
      for (int r = 0; r < ranks; ++r) {
        for (int mode = 0; mode < 2; ++mode) {
          for (int i = 0; i < kIterations; ++i) {
            for (size_t t = 0; t < tensors.size(); ++t) {
              if (results[r][mode][i][t] == expected[t]) continue;
              if (++wrong <= 5) {
                UNSCOPED_INFO(c.Describe()
                              << ": rank " << r << (mode ? " single" : " grouped") << " iteration "
                              << i << " tensor " << t << " (" << DataTypeName(tensors[t].dtype)
                              << ", " << tensors[t].count << " elements)");
              }
            }
          }
        }
      }
      INFO(c.Describe());
      CHECK(wrong == 0);
    }
  }
}

// The same runs with the option off: the backends' own orders. At least one tensor's bits
// must differ between two of them (else the test above would prove nothing).
TEST_CASE("deterministic: without the option the same runs give differing bits") {
  const std::vector<Tensor> tensors = Tensors();
  const int ranks = 3;
  std::vector<std::vector<char>> expected;
  for (size_t t = 0; t < tensors.size(); ++t) expected.push_back(Expected(ranks, t, tensors[t]));
  int off_formula = 0;  // results (rank 0, any config, mode, iteration) not the formula's
  int differing = 0;    // tensors whose results differ between configs or modes
  std::map<size_t, std::vector<char>> first;  // tensor -> its first result seen
  for (const Config& c : Configs(ranks, false)) {
    std::vector<Results> results = RunJob(c);
    if (results.empty()) continue;
    for (int mode = 0; mode < 2; ++mode) {
      for (int i = 0; i < kIterations; ++i) {
        for (size_t t = 0; t < tensors.size(); ++t) {
          const std::vector<char>& got = results[0][mode][i][t];
          if (got != expected[t]) ++off_formula;
          auto [it, fresh] = first.emplace(t, got);
          if (!fresh && it->second != got) ++differing;
        }
      }
    }
  }
  INFO("results off the formula: " << off_formula << ", differing between runs: " << differing);
  CHECK(off_formula > 0);
  CHECK(differing > 0);
}

}  // namespace
}  // namespace hora
