// Tests of the shm communicator: members as threads of one process (each maps the segment
// itself), parameterized over world size (1, 2, 3, 4, 7), element count (0, 1, odd, large),
// every dtype and op, with the default sizes and with tiny chunks and rings (so every chunked,
// pipelined and ring-wrapping path runs on small data). Values are small integers so every
// reduction is exact and the expectations are byte-for-byte. The value helpers are
// tests/collectives/dtype_values.h.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "collectives/shm/shm_communicator.h"
#include "common/reduce.h"
#include "common/types.h"
#include "tests/collectives/allreduce_exact.h"
#include "tests/collectives/dtype_values.h"
#include "tests/collectives/shm_test_util.h"

using namespace hora;
using namespace hora::testing;
using hora::testing::CompareBytes;
using hora::testing::JoinFailures;
using hora::testing::RunShmRanks;
using hora::testing::ShmRun;
using hora::testing::ShmTweak;
using hora::testing::TinyChunks;

namespace {

// The configurations every correctness test runs under: the defaults, and tiny chunks.
ShmTweak Tweak(int which) { return which == 0 ? ShmTweak() : ShmTweak(TinyChunks); }

std::string Check(const ShmRun& run) {
  std::string f = JoinFailures(run.failures);
  for (const auto& e : run.left_in_dev_shm) f += "left in /dev/shm: " + e + "\n";
  return f;
}

}  // namespace

TEST_CASE("shm allreduce: every dtype and op, exact results", "[shm]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  const int tweak = GENERATE(0, 1);
  CAPTURE(size, tweak);
  auto run = RunShmRanks(
      size,
      [&](Communicator& comm) -> std::string {
        return AllreduceEveryDtypeAndOp(comm, {0, 1, 1001, 70001});
      },
      Tweak(tweak));
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm allreduce with the postscale folded in: bit for bit Allreduce then the scale",
          "[shm]") {
  const int size = GENERATE(1, 2, 3, 4);
  const int tweak = GENERATE(0, 1);
  CAPTURE(size, tweak);
  auto run = RunShmRanks(
      size,
      [&](Communicator& comm) -> std::string {
        RANK_EXPECT(comm.folds_postscale() ? "" : "shm folds the postscale");
        const std::vector<Postscale> posts = {Postscale{1.0, comm.size()}, Postscale{0.37, 1},
                                              Postscale{}};
        for (size_t count : {size_t{0}, size_t{1}, size_t{1001}, size_t{70001}}) {
          for (DataType t : {DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                             DataType::kFloat64, DataType::kInt32}) {
            for (const Postscale& post : posts) {
              const size_t bytes = count * DataTypeSize(t);
              // Values whose sums round (not small integers): the order matters, and both
              // runs must take the same one.
              std::vector<uint8_t> in(bytes);
              for (size_t i = 0; i < count; ++i) {
                Put(t, in.data(), i, 0.1 * static_cast<double>((i * 7 + comm.rank() * 13) % 97));
              }
              std::vector<uint8_t> want = in, got = in;
              RANK_OK(comm.Allreduce(count ? want.data() : nullptr, count, t, ReduceOp::kSum));
              ScaleInPlace(want.data(), count, t, post);
              RANK_OK(comm.AllreduceScaled(count ? got.data() : nullptr, count, t, ReduceOp::kSum,
                                           post));
              RANK_EXPECT(CompareBytes(got.data(), want.data(), bytes,
                                       Label("allreduce scaled", t, ReduceOp::kSum, count)));
            }
          }
        }
        return "";
      },
      Tweak(tweak));
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm allreduce: 4M floats and doubles, sum, several chunks", "[shm]") {
  const int size = GENERATE(2, 3, 4, 7);
  CAPTURE(size);
  auto run = RunShmRanks(size, [&](Communicator& comm) -> std::string {
    const size_t count = (size_t{4} << 20) + 3;
    for (DataType t : {DataType::kFloat32, DataType::kFloat64}) {
      const size_t bytes = count * DataTypeSize(t);
      std::vector<uint8_t> buf(bytes), want(bytes);
      FillInput(t, ReduceOp::kSum, comm.rank(), buf.data(), count);
      FillExpected(t, ReduceOp::kSum, comm.size(), want.data(), count);
      for (int round = 0; round < 2; ++round) {  // the second reuses the warm segment
        std::vector<uint8_t> b = buf;
        RANK_OK(comm.Allreduce(b.data(), count, t, ReduceOp::kSum));
        RANK_EXPECT(CompareBytes(b.data(), want.data(), bytes,
                                 Label("allreduce", t, ReduceOp::kSum, count)));
      }
    }
    return "";
  });
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm allreduce: rejects average and bad dtypes, not sticky", "[shm]") {
  auto run = RunShmRanks(2, [](Communicator& comm) -> std::string {
    float x = 1;
    if (comm.Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kAverage).code() !=
        Code::kInvalidArgument) {
      return "average was accepted";
    }
    if (comm.Allreduce(&x, 1, static_cast<DataType>(42), ReduceOp::kSum).code() !=
        Code::kInvalidArgument) {
      return "dtype 42 was accepted";
    }
    RANK_OK(comm.Allreduce(&x, 1, DataType::kFloat32, ReduceOp::kSum));
    if (x != 2) return "1 + 1 = " + std::to_string(x);
    if (std::string(comm.name()) != "shm") return std::string("name is not shm");
    return "";
  });
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm broadcast from every root", "[shm]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  const int tweak = GENERATE(0, 1);
  CAPTURE(size, tweak);
  auto run = RunShmRanks(
      size,
      [&](Communicator& comm) -> std::string {
        for (size_t bytes : {size_t{0}, size_t{1}, size_t{1001}, size_t{3 << 20} + 7}) {
          for (int root = 0; root < comm.size(); ++root) {
            std::vector<uint8_t> buf(bytes, 0xEE), want(bytes);
            for (size_t i = 0; i < bytes; ++i) want[i] = static_cast<uint8_t>(i * 31 + root);
            if (comm.rank() == root) buf = want;
            RANK_OK(comm.Broadcast(buf.data(), bytes, root));
            RANK_EXPECT(CompareBytes(buf.data(), want.data(), bytes,
                                     "broadcast root " + std::to_string(root)));
          }
        }
        if (comm.Broadcast(nullptr, 0, comm.size()).code() != Code::kInvalidArgument) {
          return std::string("root out of range was accepted");
        }
        return "";
      },
      Tweak(tweak));
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm allgatherv with uneven and zero contributions", "[shm]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  const int tweak = GENERATE(0, 1);
  CAPTURE(size, tweak);
  auto run = RunShmRanks(
      size,
      [&](Communicator& comm) -> std::string {
        const int n = comm.size();
        std::vector<std::vector<size_t>> layouts;
        for (size_t c : {size_t{1}, size_t{1001}, size_t{2000000}}) {
          std::vector<size_t> v(n);
          for (int r = 0; r < n; ++r) v[r] = (r % 3 == 1) ? 0 : c + r;
          layouts.push_back(v);
        }
        layouts.push_back(std::vector<size_t>(n, 0));  // nothing at all
        std::vector<size_t> one(n, 0);
        one[n - 1] = 777;  // only the last rank contributes
        layouts.push_back(one);
        for (const auto& counts : layouts) {
          std::string failure = AllgathervBothWays(comm, counts);
          if (!failure.empty()) return failure;
        }
        return "";
      },
      Tweak(tweak));
  REQUIRE(Check(run) == "");
}

namespace {
// Bytes rank s sends to rank d in layout `k`; layout 2 leaves rank 0 out entirely.
size_t Split(int k, int s, int d, size_t scale) {
  if (k == 2 && (s == 0 || d == 0)) return 0;
  return static_cast<size_t>((s * 3 + d * 5 + k) % 7) * scale;
}
uint8_t SplitByte(int s, int d, size_t i) { return static_cast<uint8_t>(s * 29 + d * 7 + i); }
}  // namespace

TEST_CASE("shm alltoallv with uneven splits", "[shm]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  const int tweak = GENERATE(0, 1);
  CAPTURE(size, tweak);
  auto run = RunShmRanks(
      size,
      [&](Communicator& comm) -> std::string {
        const int n = comm.size(), me = comm.rank();
        for (int k = 0; k < 3; ++k) {
          for (size_t scale : {size_t{0}, size_t{1}, size_t{9973}, size_t{100003}}) {
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
      },
      Tweak(tweak));
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm alltoallv: sizes that do not match fail on every rank, not sticky", "[shm]") {
  auto run = RunShmRanks(3, [&](Communicator& comm) -> std::string {
    const int me = comm.rank();
    std::vector<size_t> send(3, 4), recv(3, 4);
    if (me == 2) recv[0] = 5;  // rank 0 sends 4 bytes to rank 2, which expects 5
    std::vector<uint8_t> in(12), out(13);
    Status s = comm.Alltoallv(in.data(), send, out.data(), recv);
    if (s.code() != Code::kInvalidArgument ||
        s.message().find("rank 0 sends 4 bytes to rank 2, which expects 5") == std::string::npos) {
      return "mismatch not reported: " + s.ToString();
    }
    RANK_OK(comm.Barrier());
    send.assign(3, 4);
    recv.assign(3, 4);
    if (me == 1) recv[1] = 3;  // rank 1 disagrees with itself
    s = comm.Alltoallv(in.data(), send, out.data(), recv);
    if (s.code() != Code::kInvalidArgument ||
        s.message().find("rank 1 sends 4 bytes to rank 1, which expects 3") == std::string::npos) {
      return "self mismatch not reported: " + s.ToString();
    }
    RANK_OK(comm.Barrier());
    return "";
  });
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm reducescatter with uneven counts, every dtype and op, in place", "[shm]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  const int tweak = GENERATE(0, 1);
  CAPTURE(size, tweak);
  auto run = RunShmRanks(
      size,
      [&](Communicator& comm) -> std::string {
        const int n = comm.size(), me = comm.rank();
        for (size_t c : {size_t{0}, size_t{1}, size_t{1001}, size_t{200001}}) {
          std::vector<size_t> counts(n);
          for (int r = 0; r < n; ++r) counts[r] = (r % 2 == 1) ? 0 : c + r;  // zeros included
          if (n == 1) counts[0] = c;
          size_t total = 0, offset = 0;
          for (int r = 0; r < n; ++r) {
            if (r < me) offset += counts[r];
            total += counts[r];
          }
          for (DataType t : kAllTypes) {
            for (ReduceOp op : kAllOps) {
              if (c > 2000 && t != DataType::kFloat32 && op != ReduceOp::kSum) continue;
              const size_t es = DataTypeSize(t);
              const size_t mine = counts[me] * es;
              std::vector<uint8_t> in(total * es), out(mine + 1), want(mine + 1);
              FillInput(t, op, me, in.data(), total);
              FillExpected(t, op, n, want.data(), counts[me], offset);
              out.back() = want.back() = 0xA5;
              RANK_OK(comm.Reducescatter(in.data(), out.data(), counts, t, op));
              RANK_EXPECT(CompareBytes(out.data(), want.data(), out.size(),
                                       Label("reducescatter", t, op, total)));
              // Output at this rank's slice of the input, and at the input's start.
              std::vector<uint8_t> a = in, b = in;
              RANK_OK(comm.Reducescatter(a.data(), a.data() + offset * es, counts, t, op));
              RANK_EXPECT(CompareBytes(a.data() + offset * es, want.data(), mine,
                                       Label("reducescatter in place", t, op, total)));
              RANK_OK(comm.Reducescatter(b.data(), b.data(), counts, t, op));
              RANK_EXPECT(
                  CompareBytes(b.data(), want.data(), mine,
                               Label("reducescatter into the input's start", t, op, total)));
            }
          }
        }
        return "";
      },
      Tweak(tweak));
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm barrier holds every rank until all arrive", "[shm]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  CAPTURE(size);
  std::atomic<int> arrived{0};
  auto run = RunShmRanks(size, [&](Communicator& comm) -> std::string {
    for (int round = 1; round <= 5; ++round) {
      // Stagger arrivals (past the spin, into the futex) so a barrier that does not wait
      // would be caught.
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
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm collectives interleave on one communicator", "[shm]") {
  const int size = GENERATE(2, 3, 7);
  const int tweak = GENERATE(0, 1);
  CAPTURE(size, tweak);
  auto run = RunShmRanks(
      size,
      [&](Communicator& comm) -> std::string {
        const int n = comm.size();
        for (int i = 0; i < 200; ++i) {
          const size_t count = static_cast<size_t>((i * 7919) % 5000);
          std::vector<int32_t> v(count, comm.rank() + i);
          RANK_OK(comm.Allreduce(v.data(), count, DataType::kInt32, ReduceOp::kSum));
          const int32_t want = n * (n - 1) / 2 + n * i;
          for (size_t k = 0; k < count; ++k) {
            if (v[k] != want) return "round " + std::to_string(i) + ": allreduce wrong";
          }
          std::vector<uint8_t> b(count % 3000, comm.rank() == i % n ? 7 : 0);
          RANK_OK(comm.Broadcast(b.data(), b.size(), i % n));
          for (uint8_t x : b) {
            if (x != 7) return "round " + std::to_string(i) + ": broadcast wrong";
          }
          if (i % 10 == 0) RANK_OK(comm.Barrier());
        }
        return "";
      },
      Tweak(tweak));
  REQUIRE(Check(run) == "");
}

TEST_CASE("shm shared board: only when asked, zeroed, the same memory for every member", "[shm]") {
  const int size = GENERATE(1, 3);
  CAPTURE(size);
  auto none = RunShmRanks(size, [&](Communicator& comm) -> std::string {
    size_t bytes = 1;
    if (comm.SharedBoard(&bytes) != nullptr || bytes != 0) return "a board nobody asked for";
    return "";
  });
  REQUIRE(Check(none) == "");
  constexpr size_t kAsked = 10000;  // not a page multiple
  auto run = RunShmRanks(
      size,
      [&](Communicator& comm) -> std::string {
        size_t bytes = 0;
        auto* board = static_cast<std::atomic<uint32_t>*>(comm.SharedBoard(&bytes));
        if (board == nullptr || bytes < kAsked) {
          return "board of " + std::to_string(bytes) + " bytes, asked for " +
                 std::to_string(kAsked);
        }
        const size_t words = kAsked / sizeof(uint32_t);
        for (size_t i = 0; i < words; ++i) {
          if (board[i].load() != 0) return "board word " + std::to_string(i) + " is not zero";
        }
        RANK_OK(comm.Barrier());
        board[words - 1 - comm.rank()].store(100 + comm.rank());  // the far end, per member
        RANK_OK(comm.Barrier());
        for (int r = 0; r < comm.size(); ++r) {
          if (board[words - 1 - r].load() != static_cast<uint32_t>(100 + r)) {
            return "member " + std::to_string(r) + "'s word is not seen";
          }
        }
        return "";
      },
      [](ShmConfig* c) { c->board_bytes = kAsked; });
  REQUIRE(Check(run) == "");
}
