// The collective battery: ranks as threads in one process, parameterized over world size
// (1, 2, 3, 4, 7), element count (0, 1, odd, large), every dtype and op. Values are small
// integers so every reduction (float16 and bfloat16 included) is exact and the expectations
// are byte-for-byte. The backend under test is the target's (battery_backend.h): gloo_test
// runs it on Gloo, tcp_test and tcp_pieces_test on the tcp backend.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <vector>

#include "common/reduce.h"
#include "common/types.h"
#include "tests/collectives/allreduce_exact.h"
#include "tests/collectives/battery_backend.h"
#include "tests/collectives/dtype_values.h"
#include "tests/collectives/rank_threads.h"

using namespace hora;
using namespace hora::testing;
using hora::testing::CompareBytes;
using hora::testing::JoinFailures;

TEST_CASE("allreduce: every dtype and op, exact results", "[battery]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  CAPTURE(size);
  auto failures = RunBattery(size, [&](Communicator& comm) -> std::string {
    return AllreduceEveryDtypeAndOp(comm, {0, 1, 1001, 300001});
  });
  REQUIRE(JoinFailures(failures) == "");
}

TEST_CASE("allreduce: rejects average and bad dtypes", "[battery]") {
  auto failures = RunBattery(1, [](Communicator& comm) -> std::string {
    float x = 1;
    if (comm.Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kAverage).code() !=
        Code::kInvalidArgument) {
      return "average was accepted";
    }
    if (comm.Allreduce(&x, 1, static_cast<DataType>(42), ReduceOp::kSum).code() !=
        Code::kInvalidArgument) {
      return "dtype 42 was accepted";
    }
    RANK_OK(comm.Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum));  // not sticky
    if (comm.name() != TheBattery().name) return std::string("name is ") + comm.name();
    return "";
  });
  REQUIRE(JoinFailures(failures) == "");
}

TEST_CASE("broadcast from every root", "[battery]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  CAPTURE(size);
  auto failures = RunBattery(size, [&](Communicator& comm) -> std::string {
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{1001}, size_t{300000}}) {
      for (int root = 0; root < comm.size(); ++root) {
        std::vector<uint8_t> buf(bytes, 0xEE), want(bytes);
        for (size_t i = 0; i < bytes; ++i) want[i] = static_cast<uint8_t>(i * 31 + root);
        if (comm.rank() == root) buf = want;
        RANK_OK(comm.Broadcast(buf.data(), bytes, root));
        RANK_EXPECT(
            CompareBytes(buf.data(), want.data(), bytes, "broadcast root " + std::to_string(root)));
      }
    }
    if (comm.Broadcast(nullptr, 0, comm.size()).code() != Code::kInvalidArgument) {
      return std::string("root out of range was accepted");
    }
    return "";
  });
  REQUIRE(JoinFailures(failures) == "");
}

TEST_CASE("allgatherv with uneven, zero and equal contributions", "[battery]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  CAPTURE(size);
  auto failures = RunBattery(size, [&](Communicator& comm) -> std::string {
    const int n = comm.size();
    std::vector<std::vector<size_t>> layouts;
    for (size_t c : {size_t{1}, size_t{1001}, size_t{100000}}) {
      std::vector<size_t> v(n);
      for (int r = 0; r < n; ++r) v[r] = (r % 3 == 1) ? 0 : c + r;
      layouts.push_back(v);
    }
    layouts.push_back(std::vector<size_t>(n, 0));      // nothing at all
    layouts.push_back(std::vector<size_t>(n, 30001));  // equal (a paced ring on tcp)
    std::vector<size_t> one(n, 0);
    one[n - 1] = 777;  // only the last rank contributes
    layouts.push_back(one);
    for (const auto& counts : layouts) {
      std::string failure = AllgathervBothWays(comm, counts);
      if (!failure.empty()) return failure;
    }
    return "";
  });
  REQUIRE(JoinFailures(failures) == "");
}

namespace {
// Bytes rank s sends to rank d in layout `k`; layout 2 leaves rank 0 out entirely.
size_t Split(int k, int s, int d, size_t scale) {
  if (k == 2 && (s == 0 || d == 0)) return 0;
  return static_cast<size_t>((s * 3 + d * 5 + k) % 7) * scale;
}
uint8_t SplitByte(int s, int d, size_t i) { return static_cast<uint8_t>(s * 29 + d * 7 + i); }
}  // namespace

TEST_CASE("alltoallv with uneven splits", "[battery]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  CAPTURE(size);
  auto failures = RunBattery(size, [&](Communicator& comm) -> std::string {
    const int n = comm.size(), me = comm.rank();
    for (int k = 0; k < 3; ++k) {
      for (size_t scale : {size_t{0}, size_t{1}, size_t{9973}}) {
        std::vector<size_t> send(n), recv(n);
        std::vector<uint8_t> in, want;
        for (int d = 0; d < n; ++d) {
          send[d] = Split(k, me, d, scale);
          for (size_t i = 0; i < send[d]; ++i) in.push_back(SplitByte(me, d, i));
        }
        for (int s = 0; s < n; ++s) {
          recv[s] = Split(k, s, me, scale);
          for (size_t i = 0; i < recv[s]; ++i) want.push_back(SplitByte(s, me, i));
        }
        std::vector<uint8_t> out(want.size(), 0xEE);
        RANK_OK(comm.Alltoallv(in.data(), send, out.data(), recv));
        RANK_EXPECT(CompareBytes(
            out.data(), want.data(), want.size(),
            "alltoallv layout " + std::to_string(k) + " scale " + std::to_string(scale)));
      }
    }
    return "";
  });
  REQUIRE(JoinFailures(failures) == "");
}

TEST_CASE("reducescatter with uneven and even counts, every dtype and op", "[battery]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  CAPTURE(size);
  auto failures = RunBattery(size, [&](Communicator& comm) -> std::string {
    const int n = comm.size(), me = comm.rank();
    for (size_t c : {size_t{0}, size_t{1}, size_t{1001}, size_t{50001}, size_t{20000}}) {
      std::vector<size_t> counts(n);
      for (int r = 0; r < n; ++r) counts[r] = (r % 2 == 1) ? 0 : c + r;  // zeros included
      if (n == 1) counts[0] = c;
      if (c == 20000) {  // even but for a remainder (a paced ring on tcp)
        for (int r = 0; r < n; ++r) counts[r] = c + (r < 2 ? 1 : 0);
      }
      size_t total = 0, offset = 0;
      for (int r = 0; r < n; ++r) {
        if (r < me) offset += counts[r];
        total += counts[r];
      }
      for (DataType t : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          if (c > 2000 && t != DataType::kFloat32 && op != ReduceOp::kSum) continue;
          const size_t es = DataTypeSize(t);
          std::vector<uint8_t> in(total * es), out(counts[me] * es + 1), want(counts[me] * es + 1);
          FillInput(t, op, me, in.data(), total);
          FillExpected(t, op, n, want.data(), counts[me], offset);
          out.back() = want.back() = 0xA5;
          RANK_OK(comm.Reducescatter(in.data(), out.data(), counts, t, op));
          RANK_EXPECT(CompareBytes(out.data(), want.data(), out.size(),
                                   Label("reducescatter", t, op, total)));
          // In place (communicator.h): the output is this rank's slice of the input.
          std::vector<uint8_t> a = in;
          RANK_OK(comm.Reducescatter(a.data(), a.data() + offset * es, counts, t, op));
          RANK_EXPECT(CompareBytes(a.data() + offset * es, want.data(), counts[me] * es,
                                   Label("reducescatter in place", t, op, total)));
        }
      }
    }
    return "";
  });
  REQUIRE(JoinFailures(failures) == "");
}

TEST_CASE("barrier holds every rank until all arrive", "[battery]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  CAPTURE(size);
  std::atomic<int> arrived{0};
  auto failures = RunBattery(size, [&](Communicator& comm) -> std::string {
    for (int round = 1; round <= 5; ++round) {
      // Stagger arrivals so a barrier that does not wait would be caught.
      if (comm.rank() == round % comm.size()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      arrived.fetch_add(1);
      RANK_OK(comm.Barrier());
      const int seen = arrived.load();
      if (seen < round * comm.size()) {
        return "barrier round " + std::to_string(round) + " passed with only " +
               std::to_string(seen) + " arrivals";
      }
      RANK_OK(comm.Barrier());  // nobody starts the next round before all have checked
    }
    return "";
  });
  REQUIRE(JoinFailures(failures) == "");
}

// Not run by default: bazel-bin/tests/collectives/gloo_test "[bench]" (or tcp_test)
TEST_CASE("bench: 64 MiB float32 allreduce between 2 ranks", "[.bench]") {
  const size_t count = (64u << 20) / sizeof(float);
  std::vector<double> secs(2);
  auto failures = RunBattery(2, [&](Communicator& comm) -> std::string {
    std::vector<float> buf(count, 1.0f);
    RANK_OK(comm.Allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum));  // warm-up
    const int iters = 5;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) {
      RANK_OK(comm.Allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum));
    }
    secs[comm.rank()] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iters;
    return "";
  });
  REQUIRE(JoinFailures(failures) == "");
  WARN("64 MiB float32 allreduce, 2 ranks as threads: "
       << secs[0] * 1e3 << " ms (" << (64.0 / 1024) / secs[0] << " GB/s algorithm bandwidth)");
}
