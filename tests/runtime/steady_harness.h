// Helpers of the steady path's tests (steady_*_test.cc, deterministic_test.cc): engines as
// threads on one "host" (shm), with a bound on every wait.
#ifndef HORA_TESTS_RUNTIME_STEADY_HARNESS_H_
#define HORA_TESTS_RUNTIME_STEADY_HARNESS_H_

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/options.h"
#include "runtime/steady_path.h"
#include "tests/harness/hang_bound.h"
#include "tests/runtime/engine_threads.h"

namespace hora {
namespace testing {

// The bound of one wait (scaled for sanitizers by HangBound).
inline std::chrono::duration<double> WaitBound() {
  return std::chrono::duration<double>(HangBound(std::chrono::milliseconds(20000)));
}

// Every rank's body returned "" (each failure reported with its rank).
inline void CheckEveryRank(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r << ": " << errors[r]);
    CHECK(errors[r].empty());
  }
}

// The first rank's error, "rank r: ...", or "" when every rank's body returned "".
inline std::string FirstError(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) return "rank " + std::to_string(r) + ": " + errors[r];
  }
  return "";
}

inline void OneHost(Options* o, const std::string& steady) {
  o->hostname = "steadyhost";  // every rank on one host: shm
  o->fusion_threshold_bytes = 0;
  o->steady = steady;
}

// The board a test runs on: "shm" (every rank on one host: runtime/steady_shm_board.h),
// "net" (ranks on two hosts, host0 and host1 by rank parity: the board over messages,
// runtime/steady_net_board.h, on two levels once some host holds two ranks) or "flat" (a
// host per rank: the board over messages, every member messaging every other).
inline void Layout(Options* o, const std::string& steady, const std::string& board) {
  OneHost(o, steady);
  if (board == "net") o->hostname = "host" + std::to_string(o->rank % 2);
  if (board == "flat") o->hostname = "host" + std::to_string(o->rank);
}

// Runs one operation to its end (each wait bounded). Without an output, its result (shape,
// splits, data) is appended to *keep. "" or what went wrong, naming the operation and step.
inline std::string RunOne(Engine& e, const TensorSpec& spec, void* in, void* output, int step,
                          std::vector<char>* keep) {
  auto append = [keep](const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    keep->insert(keep->end(), c, c + n);
  };
  const std::string what = spec.name + " " + std::to_string(step) + ": ";
  auto h = e.Enqueue(spec, in, output);
  if (!h.ok()) return what + h.status().ToString();
  Status s = e.Wait(h.value(), WaitBound());
  if (s.ok() && output == nullptr) {
    s = e.handles().WithResult(h.value(), [&](const OpResult& res) {
      append(res.shape.data(), res.shape.size() * sizeof(int64_t));
      append(res.splits.data(), res.splits.size() * sizeof(int64_t));
      append(res.data.data(), res.data.size());
      return Status::Ok();
    });
  }
  (void)e.Release(h.value());
  return s.ok() ? "" : what + s.ToString();
}

// What a run leaves per rank: every result's bytes in order, and the steady path's counters.
struct SteadyOutcome {
  std::vector<std::vector<char>> bytes;
  std::vector<SteadyStats> stats;
};

// Runs `ranks` engines as threads on `board` (Layout) with HORA_STEADY=`steady`, then
// `tweak` (may be empty) on each rank's options. body(r, e, bytes) appends every result it
// keeps to *bytes, which becomes out->bytes[r]; a rank whose body returned "" also leaves its
// steady counters in out->stats[r]. "" or FirstError.
inline std::string RunSteady(
    int ranks, const std::string& steady, const std::string& board, SteadyOutcome* out,
    const std::function<std::string(int, Engine&, std::vector<char>*)>& body,
    const std::function<void(Options*)>& tweak = nullptr) {
  out->bytes.assign(ranks, {});
  out->stats.assign(ranks, {});
  auto errors = RunRanks(
      ranks,
      [&](int r, Engine& e) -> std::string {
        std::string failed = body(r, e, &out->bytes[r]);
        if (failed.empty()) out->stats[r] = e.Steady(kGlobalProcessSet).value();
        return failed;
      },
      [&](Options* o) {
        Layout(o, steady, board);
        if (tweak) tweak(o);
      });
  return FirstError(errors);
}

// Per rank: the steady path's run (`on`) gave the coordinator path's results (`off`) bit for
// bit; `off` ran nothing fast; `on` cached `entries` names, ran at least `min_fast`
// operations fast and at least `min_slow` the normal way.
inline void CheckLikeOff(const SteadyOutcome& off, const SteadyOutcome& on, int64_t entries,
                         int64_t min_fast, int64_t min_slow) {
  REQUIRE(off.bytes.size() == on.bytes.size());
  for (size_t r = 0; r < off.bytes.size(); ++r) {
    INFO("rank " << r);
    REQUIRE(off.bytes[r].size() == on.bytes[r].size());
    CHECK(std::memcmp(off.bytes[r].data(), on.bytes[r].data(), off.bytes[r].size()) == 0);
    CHECK(off.stats[r].fast == 0);
    CHECK(on.stats[r].entries == entries);
    CHECK(on.stats[r].fast >= min_fast);
    CHECK(on.stats[r].slow >= min_slow);
  }
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_RUNTIME_STEADY_HARNESS_H_
