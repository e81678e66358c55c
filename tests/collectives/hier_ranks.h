// Runs the members of a hierarchical communicator as threads of one process, each "host"
// named by BackendConfig.hostnames (the shm groups of different fake hosts get different
// segments, the cross-host and flat groups are gloo over 127.0.0.1), bootstrapped through one
// MemoryStore. Each rank's body returns "" or its first failure; the caller asserts in the
// main thread (Catch2 assertions are not thread-safe).
#ifndef HORA_TESTS_COLLECTIVES_HIER_RANKS_H_
#define HORA_TESTS_COLLECTIVES_HIER_RANKS_H_

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "collectives/registry.h"
#include "tests/collectives/rank_threads.h"
#include "tests/harness/memory_store.h"

namespace hora {
namespace testing {

// hostnames for `hosts` hosts of `per_host` members each, host-major ("h0, h0, h1, h1").
inline std::vector<std::string> Hosts(int hosts, int per_host) {
  std::vector<std::string> names;
  for (int h = 0; h < hosts; ++h) {
    for (int i = 0; i < per_host; ++i) names.push_back("fakehost" + std::to_string(h));
  }
  return names;
}

// Unique per call and process: the shm segments' names are tagged by the key prefix.
inline std::string UniqueHierPrefix() {
  static std::atomic<int> counter{0};
  return "hiertest-" + std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1)) + "/";
}

// The config of set rank `rank` of a set whose members are on `hostnames`; the members are
// the job's ranks 0, 1, ... (set 0) unless process_set says otherwise.
inline BackendConfig HierConfig(int rank, const std::vector<std::string>& hostnames, KvStore* store,
                                std::chrono::milliseconds timeout) {
  BackendConfig c;
  c.rank = rank;
  for (size_t r = 0; r < hostnames.size(); ++r) c.global_ranks.push_back(static_cast<int>(r));
  c.hostnames = hostnames;
  c.store = store;
  c.key_prefix = UniqueHierPrefix();
  c.bind_address = "127.0.0.1";
  c.timeout = timeout;
  return c;
}

// Creates every member's communicator with `selection` and runs body on each. `tweak` (may
// be empty) changes each member's config first.
inline std::vector<std::string> RunHierRanks(
    const std::vector<std::string>& hostnames, const RankBody& body,
    const std::string& selection = "hierarchical",
    std::chrono::milliseconds timeout = std::chrono::milliseconds(20000),
    const std::function<void(BackendConfig*)>& tweak = nullptr) {
  MemoryStore store;
  const int size = static_cast<int>(hostnames.size());
  std::vector<BackendConfig> configs;
  for (int r = 0; r < size; ++r) {
    configs.push_back(HierConfig(r, hostnames, &store, timeout));
    if (tweak) tweak(&configs.back());
  }
  const std::string prefix = configs[0].key_prefix;
  std::vector<std::string> failures(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      configs[r].key_prefix = prefix;
      auto comm = CreateCommunicator(selection, "HORA_CPU_OPERATIONS", configs[r]);
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

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_HIER_RANKS_H_
