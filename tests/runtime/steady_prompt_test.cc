// The steady path's prompt callers (SteadyOptions::prompt_wait, runtime/steady_options.h): the
// enqueue of a caller that waits at once runs the large instance its offer completes; an
// overlapping caller's enqueue returns at once. Engines as threads on one host (shm).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "tests/runtime/engine_threads.h"
#include "tests/runtime/steady_harness.h"

namespace hora {
namespace {

using testing::CheckEveryRank;
using testing::OneHost;
using testing::RunRanks;
using testing::WaitBound;

TEST_CASE("steady path: a prompt caller's offer that completes a large instance runs it",
          "[steady]") {
  // Rank 1 offers last (20 ms after rank 0). While it waits right after enqueueing (as a
  // blocking call does), its enqueue runs the 1 MiB instance itself; once it waits 3 ms
  // later (a caller that overlaps), the enqueue returns at once and the set's thread runs it.
  constexpr int kRanks = 2;
  constexpr int64_t kCount = 256 << 10;  // 1 MiB of float32: above the inline size
  constexpr int kSteps = 12;
  auto errors = RunRanks(
      kRanks,
      [&](int r, Engine& e) -> std::string {
        int64_t by_enqueue[2] = {0, 0};  // in the last 7 steps of each phase
        for (int phase = 0; phase < 2; ++phase) {
          for (int i = 0; i < kSteps; ++i) {
            // Counted once the name is cached and the previous wait set the caller's kind.
            if (i == kSteps - 7) by_enqueue[phase] = -e.Steady(0).value().run_by_enqueue;
            std::vector<float> buf(static_cast<size_t>(kCount), static_cast<float>(r + 1));
            if (r == 1) usleep(20000);  // rank 0 has offered by then, even under a sanitizer
            auto h = testing::Allreduce(e, "big", &buf, ReduceOp::kSum);
            if (!h.ok()) return "enqueue: " + h.status().ToString();
            if (r == 1 && phase == 1) usleep(3000);
            Status s = e.Wait(h.value(), WaitBound());
            (void)e.Release(h.value());
            if (!s.ok()) return "phase " + std::to_string(phase) + ": " + s.ToString();
            if (buf != std::vector<float>(static_cast<size_t>(kCount), 3.0f)) {
              return "phase " + std::to_string(phase) + " step " + std::to_string(i) +
                     ": wrong result";
            }
          }
          by_enqueue[phase] += e.Steady(0).value().run_by_enqueue;
        }
        if (e.Steady(0).value().fast < 2 * kSteps - 2 * SteadyOptions{}.warmup) {
          return "the fast path was not taken";
        }
        if (r == 0) return "";
        // The set's thread may, rarely, take the log first.
        if (by_enqueue[0] < 3) {
          return "prompt: run by the enqueue " + std::to_string(by_enqueue[0]) + " times of 7";
        }
        if (by_enqueue[1] > 1) {
          return "overlapping: run by the enqueue " + std::to_string(by_enqueue[1]) + " times of 7";
        }
        return "";
      },
      [&](Options* o) { OneHost(o, "auto"); });
  CheckEveryRank(errors);
}

}  // namespace
}  // namespace hora
