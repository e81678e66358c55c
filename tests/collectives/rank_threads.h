// Runs N ranks of a world as threads in one process (Gloo, or a backend the caller builds),
// bootstrapped through a MemoryStore.
// Each rank's body returns "" on success or a description of its first failure; the caller
// asserts in the main thread (Catch2 assertions are not thread-safe).
#ifndef HORA_TESTS_COLLECTIVES_RANK_THREADS_H_
#define HORA_TESTS_COLLECTIVES_RANK_THREADS_H_

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/gloo/gloo_communicator.h"
#include "common/kv_store.h"
#include "common/status.h"
#include "tests/harness/memory_store.h"

namespace hora {
namespace testing {

using RankBody = std::function<std::string(Communicator& comm)>;

// Builds rank `rank` of `size` through `store` (shared by every rank of the run).
using CommFactory = std::function<StatusOr<std::unique_ptr<Communicator>>(
    int rank, int size, KvStore* store, std::chrono::milliseconds timeout)>;

inline StatusOr<std::unique_ptr<Communicator>> CreateGlooRank(int rank, int size, KvStore* store,
                                                              std::chrono::milliseconds timeout) {
  GlooConfig config;
  config.rank = rank;
  config.size = size;
  config.store = store;
  config.key_prefix = "gloo/test/";
  config.timeout = timeout;
  return CreateGlooCommunicator(config);
}

// Creates `size` communicators with `factory` (one per thread) and runs `body` on each.
// Returns one entry per rank: "" when it succeeded.
inline std::vector<std::string> RunRanksWith(
    int size, const CommFactory& factory, const RankBody& body,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  MemoryStore store;
  std::vector<std::string> failures(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto comm = factory(r, size, &store, timeout);
      if (!comm.ok()) {
        failures[r] = "rank " + std::to_string(r) + ": create: " + comm.status().ToString();
        return;
      }
      std::string f = body(*comm.value());
      if (!f.empty()) failures[r] = "rank " + std::to_string(r) + ": " + f;
    });
  }
  for (auto& t : threads) t.join();
  return failures;
}

// RunRanksWith on Gloo.
inline std::vector<std::string> RunRanks(
    int size, const RankBody& body,
    std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  return RunRanksWith(size, CreateGlooRank, body, timeout);
}

// "" when every rank succeeded, else all failures joined by newlines.
inline std::string JoinFailures(const std::vector<std::string>& failures) {
  std::string out;
  for (const auto& f : failures) {
    if (!f.empty()) out += f + "\n";
  }
  return out;
}

// Describes the first differing byte, or "" when equal.
inline std::string CompareBytes(const void* got, const void* want, size_t bytes,
                                const std::string& what) {
  if (bytes == 0 || std::memcmp(got, want, bytes) == 0) return "";
  const auto* g = static_cast<const unsigned char*>(got);
  const auto* w = static_cast<const unsigned char*>(want);
  size_t i = 0;
  while (g[i] == w[i]) ++i;
  return what + ": byte " + std::to_string(i) + " of " + std::to_string(bytes) + " is " +
         std::to_string(g[i]) + ", expected " + std::to_string(w[i]);
}

}  // namespace testing
}  // namespace hora

// Inside a RankBody: return the failure text if a Status is not OK.
#define RANK_OK(expr)                                                 \
  do {                                                                \
    ::hora::Status _s = (expr);                                       \
    if (!_s.ok()) return std::string(#expr) + " -> " + _s.ToString(); \
  } while (0)

// Inside a RankBody: return the failure text if a comparison failed.
#define RANK_EXPECT(text)       \
  do {                          \
    std::string _t = (text);    \
    if (!_t.empty()) return _t; \
  } while (0)

#endif  // HORA_TESTS_COLLECTIVES_RANK_THREADS_H_
