// The steady path learns the tensors of buckets the coordinator fused (runtime/steady_path.h
// "Learning"): every rank submits six allreduces at once each step (rank 0 last, so the
// coordinator holds the first ones complete while the others are partly submitted and fuses
// all six into one bucket), four small and two large. All six become entries and run fast on
// either board; over messages the small ones are agreed on without their data and run fused
// with the others of their log group (runtime/steady_path.h "Execution"). Results equal the
// coordinator path's bit for bit.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/limits.h"
#include "tests/runtime/steady_harness.h"

namespace hora {
namespace {

using testing::WaitBound;

constexpr int kRanks = 3;
constexpr int kIterations = SteadyOptions{}.warmup + 5;
// 16 floats (64 bytes: Eager on either board) and 6,000 (24,000 bytes: above both).
constexpr int64_t kCounts[] = {16, 16, 16, 16, 6000, 6000};
constexpr int kTensors = 6;

using Outcome = testing::SteadyOutcome;

std::string RunFused(const std::string& steady, const std::string& board, Outcome* out) {
  std::atomic<int> submitted{0};  // submissions of the other ranks, all iterations
  return testing::RunSteady(
      kRanks, steady, board, out,
      [&](int r, Engine& e, std::vector<char>* bytes) -> std::string {
        for (int i = 0; i < kIterations; ++i) {
          if (r == 0) {  // after the others' six: the coordinator fuses what rank 0 completes
            const auto deadline = std::chrono::steady_clock::now() + WaitBound();
            while (submitted.load() < (kRanks - 1) * (i + 1)) {
              if (std::chrono::steady_clock::now() > deadline) return "the others never submitted";
              std::this_thread::sleep_for(std::chrono::microseconds(200));
            }
          }
          std::vector<std::vector<float>> data(kTensors);
          std::vector<int64_t> handles;
          for (int t = 0; t < kTensors; ++t) {
            data[t].resize(static_cast<size_t>(kCounts[t]));
            for (size_t j = 0; j < data[t].size(); ++j) {
              // Quarters below 16: exact sums in any order (the coordinator's fused bucket and
              // the steady path's eager reduction add in different orders).
              data[t][j] =
                  static_cast<float>((r * 31 + i * 7 + t * 3 + static_cast<int>(j)) % 64) / 4;
            }
            TensorSpec spec;
            spec.name = "grad." + std::to_string(t);
            spec.shape = {kCounts[t]};
            auto h = e.Enqueue(spec, data[t].data(), data[t].data());
            if (!h.ok()) return spec.name + ": " + h.status().ToString();
            handles.push_back(h.value());
          }
          if (r != 0) submitted.fetch_add(1);
          for (int t = 0; t < kTensors; ++t) {
            Status s = e.Wait(handles[t], WaitBound());
            (void)e.Release(handles[t]);
            if (!s.ok())
              return "grad." + std::to_string(t) + " " + std::to_string(i) + ": " + s.ToString();
            const char* c = reinterpret_cast<const char*>(data[t].data());
            bytes->insert(bytes->end(), c, c + data[t].size() * sizeof(float));
          }
        }
        return "";
      },
      [](Options* o) {
        o->fusion_threshold_bytes = kDefaultFusionThresholdBytes;  // Layout turns fusion off
      });
}

TEST_CASE("steady path: the tensors of a fused bucket are learned and run on it, bit for bit",
          "[steady]") {
  const std::string board = GENERATE(as<std::string>{}, "shm", "net");
  INFO("board " << board);
  Outcome off, on;
  REQUIRE(RunFused("off", board, &off) == "");
  REQUIRE(RunFused("auto", board, &on) == "");
  // Cached after SteadyOptions::warmup fused plans; then every submission of a cached name
  // is an instance (one may fall back past the patience on a loaded machine). Under load the
  // coordinator may fuse one warmup iteration's burst differently: those tensors are then
  // learned an iteration later (seen once in a loaded run: 27 of 30).
  const int64_t instances = kTensors * (kIterations - SteadyOptions{}.warmup);
  testing::CheckLikeOff(off, on, kTensors, instances - kTensors - 2, 0);
  for (int r = 0; r < kRanks; ++r) {
    CHECK(on.stats[r].fast + on.stats[r].slow <= instances);
    CHECK(on.stats[r].fast + on.stats[r].slow >= instances - kTensors);
  }
  if (board == "net") {
    // Rank 0 submits its six in a burst while the set's thread runs the first one ordered:
    // the rest wait for it and go out as one group (steady_net_board.h), run fused.
    int64_t fused = 0;
    for (int r = 0; r < kRanks; ++r) fused += on.stats[r].fused;
    CHECK(fused > 0);
  }
}

}  // namespace
}  // namespace hora
