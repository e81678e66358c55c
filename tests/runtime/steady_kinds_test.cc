// The steady path beyond allreduce (runtime/steady_path.h): allgathers, broadcasts,
// reducescatters (an Average with a prescale, 4 rows over 3 ranks: uneven parts) and alltoalls
// (even splits), small (their data on the board) and large (on the steady communicator),
// engines as threads on one host (the shared-memory board) and on two "hosts" (the board over
// messages). Their results equal the coordinator path's bit for bit, the path really runs
// them (its counters), and a rank whose allgather rows change falls back to the coordinator,
// which gathers the uneven rows as before.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tests/runtime/steady_harness.h"

namespace hora {
namespace {

using testing::WaitBound;

constexpr int kRanks = 3;
constexpr int kIterations = SteadyOptions{}.warmup + 5;
constexpr int kUneven = SteadyOptions{}.warmup + 2;  // rank 2 gathers a row less there

// Rank r's allgather rows (rows x 3 floats) at iteration i.
std::vector<float> Rows(int r, int i, int rows) {
  std::vector<float> v(static_cast<size_t>(rows) * 3);
  for (size_t j = 0; j < v.size(); ++j) v[j] = static_cast<float>(r * 100 + i * 10 + j) / 7.0f;
  return v;
}

using Outcome = testing::SteadyOutcome;

// rows: each rank's allgather rows (x 3 floats), and the broadcast's int32 count / 2.
std::string RunKinds(const std::string& steady, const std::string& board, int64_t rows,
                     Outcome* out) {
  return testing::RunSteady(
      kRanks, steady, board, out, [&](int r, Engine& e, std::vector<char>* bytes) -> std::string {
        auto keep = [&](const void* p, size_t n) {
          const char* c = static_cast<const char*>(p);
          bytes->insert(bytes->end(), c, c + n);
        };
        // Runs one operation to its end; its result kept when it has one.
        auto run = [&](const TensorSpec& spec, void* in, void* output, int i) {
          return testing::RunOne(e, spec, in, output, i, bytes);
        };
        for (int i = 0; i < kIterations; ++i) {
          const int64_t n = (r == 2 && i == kUneven) ? rows - 1 : rows;
          std::vector<float> mine = Rows(r, i, static_cast<int>(n));
          TensorSpec ag;
          ag.name = "rows";
          ag.collective = CollectiveType::kAllgather;
          ag.shape = {n, 3};
          std::string failed = run(ag, mine.data(), nullptr, i);
          if (!failed.empty()) return failed;

          std::vector<int32_t> b(static_cast<size_t>(2 * rows));
          for (size_t j = 0; j < b.size(); ++j) b[j] = r * 1000 + i * 10 + static_cast<int>(j);
          TensorSpec bc;
          bc.name = "from1";
          bc.collective = CollectiveType::kBroadcast;
          bc.dtype = DataType::kInt32;
          bc.shape = {2 * rows};
          bc.root = 1;
          failed = run(bc, b.data(), b.data(), i);
          if (!failed.empty()) return failed;
          if (b[0] != 1000 + i * 10)
            return "broadcast " + std::to_string(i) + ": got " + std::to_string(b[0]);
          keep(b.data(), b.size() * sizeof(int32_t));

          std::vector<float> parts = Rows(r, i + 100, static_cast<int>(2 * rows));
          TensorSpec rs;
          rs.name = "parts";
          rs.collective = CollectiveType::kReducescatter;
          rs.op = ReduceOp::kAverage;
          rs.prescale = 0.5;
          rs.shape = {2 * rows, 3};
          failed = run(rs, parts.data(), nullptr, i);
          if (!failed.empty()) return failed;

          std::vector<float> send = Rows(r, i + 200, static_cast<int>(kRanks * rows));
          TensorSpec aa;
          aa.name = "exchange";
          aa.collective = CollectiveType::kAlltoall;  // even splits: rows to each rank
          aa.shape = {kRanks * rows, 3};
          failed = run(aa, send.data(), nullptr, i);
          if (!failed.empty()) return failed;
        }
        return "";
      });
}

TEST_CASE("steady path: allgathers, broadcasts, reducescatters, alltoalls run on it, bit for bit",
          "[steady]") {
  const std::string board = GENERATE(as<std::string>{}, "shm", "net", "flat");
  // 2 rows: 24 bytes (Eager); 2000 rows: 24,000 bytes (above either board's Eager size).
  const int64_t rows = GENERATE(int64_t{2}, int64_t{2000});
  INFO("board " << board << ", " << rows << " rows");
  Outcome off, on;
  REQUIRE(RunKinds("off", board, rows, &off) == "");
  REQUIRE(RunKinds("auto", board, rows, &on) == "");
  // All cached after SteadyOptions::warmup plans; the uneven iteration falls back (the allgather,
  // whose rows changed on rank 2, and nothing else), then all run fast again.
  const int64_t fast_runs = 4 * (kIterations - SteadyOptions{}.warmup) - 1;
  testing::CheckLikeOff(off, on, 4, fast_runs - 1, 1);
}

}  // namespace
}  // namespace hora
