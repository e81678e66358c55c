// The steady path with uneven layouts (runtime/steady_path.h "Learning"): an alltoall whose
// splits differ per rank (rank 0's even, the others' not, as a mixture-of-experts router's
// are) and an allgather whose ranks contribute different row counts, the same every step,
// are learned from the coordinator's plans and run on the steady communicator with the
// learned plan's sizes; a step where one rank alone changes its splits falls back on every
// rank, and the next steps run on the steady path again. Engines as threads, on one host and
// on two "hosts"; results equal the coordinator path's bit for bit.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "tests/runtime/steady_harness.h"

namespace hora {
namespace {

using testing::WaitBound;

constexpr int kRanks = 3;
constexpr int kIterations = SteadyOptions{}.warmup + 6;
constexpr int kChange = SteadyOptions{}.warmup + 2;  // rank 1 routes differently there
constexpr int64_t kCols = 4;

// Rows rank r sends to each rank at iteration i (6 in all, whatever the step).
std::vector<int64_t> Splits(int r, int i) {
  if (r == 0) return {2, 2, 2};
  if (r == 1) return i == kChange ? std::vector<int64_t>{2, 1, 3} : std::vector<int64_t>{3, 0, 3};
  return {1, 4, 1};
}

using Outcome = testing::SteadyOutcome;

std::string RunUneven(const std::string& steady, const std::string& board, Outcome* out) {
  return testing::RunSteady(
      kRanks, steady, board, out, [&](int r, Engine& e, std::vector<char>* bytes) -> std::string {
        auto run = [&](const TensorSpec& spec, void* in, int i) {
          return testing::RunOne(e, spec, in, nullptr, i, bytes);
        };
        for (int i = 0; i < kIterations; ++i) {
          TensorSpec aa;
          aa.name = "route";
          aa.collective = CollectiveType::kAlltoall;
          aa.splits = Splits(r, i);
          aa.shape = {6, kCols};
          std::vector<float> send(static_cast<size_t>(6 * kCols));
          for (size_t j = 0; j < send.size(); ++j) {
            send[j] = static_cast<float>(r * 1000 + i * 100 + static_cast<int>(j)) / 3.0f;
          }
          std::string failed = run(aa, send.data(), i);
          if (!failed.empty()) return failed;

          TensorSpec ag;
          ag.name = "ragged";
          ag.collective = CollectiveType::kAllgather;
          ag.shape = {r + 1, kCols};  // 1, 2 and 3 rows
          std::vector<float> rows(static_cast<size_t>((r + 1) * kCols));
          for (size_t j = 0; j < rows.size(); ++j) {
            rows[j] = static_cast<float>(r * 77 + i * 7 + static_cast<int>(j)) / 9.0f;
          }
          failed = run(ag, rows.data(), i);
          if (!failed.empty()) return failed;
        }
        return "";
      });
}

TEST_CASE("steady path: uneven alltoalls and allgathers run on it with the learned sizes",
          "[steady]") {
  const std::string board = GENERATE(as<std::string>{}, "shm", "net", "flat");
  INFO("board " << board);
  Outcome off, on;
  REQUIRE(RunUneven("off", board, &off) == "");
  REQUIRE(RunUneven("auto", board, &on) == "");
  // Both cached after the warmup; the step where rank 1 routes differently falls back on
  // every rank (its alltoall; the allgather stays fast), then all run fast again.
  const int64_t fast_runs = 2 * (kIterations - SteadyOptions{}.warmup) - 1;
  testing::CheckLikeOff(off, on, 2, fast_runs - 1, 1);
}

}  // namespace
}  // namespace hora
