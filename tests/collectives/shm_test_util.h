// Runs N members of a shm communicator as threads of this process (each thread maps the
// segment itself, as a process would), bootstrapped through a MemoryStore, and lists what
// the communicators left in /dev/shm. Each rank's body returns "" or its first failure; the
// caller asserts in the main thread.
#ifndef HORA_TESTS_COLLECTIVES_SHM_TEST_UTIL_H_
#define HORA_TESTS_COLLECTIVES_SHM_TEST_UTIL_H_

#include <dirent.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collectives/shm/shm_communicator.h"
#include "tests/collectives/rank_threads.h"
#include "tests/harness/memory_store.h"

namespace hora {
namespace testing {

// A key prefix no other test of this process uses; its sanitized form tags the segment name.
// This test process, unique on the host: two in sandboxes of their own may have the same pid.
inline const std::string& ProcessTag() {
  static const std::string tag =
      std::to_string(getpid()) + "-" + std::to_string(std::random_device{}()) + "-";
  return tag;
}

inline std::string UniquePrefix(const std::string& what) {
  static std::atomic<int> counter{0};
  return "shmtest-" + what + "-" + ProcessTag() + std::to_string(counter.fetch_add(1)) + "/";
}

// The entries of /dev/shm whose name contains `needle`.
inline std::vector<std::string> ShmEntries(const std::string& needle) {
  std::vector<std::string> found;
  if (DIR* d = opendir("/dev/shm")) {
    while (dirent* e = readdir(d)) {
      if (std::string(e->d_name).find(needle) != std::string::npos) found.push_back(e->d_name);
    }
    closedir(d);
  }
  return found;
}

// The tag of a key prefix as it appears in segment names (see shm_segment.h).
inline std::string SegmentTag(const std::string& prefix) {
  std::string t;
  for (char c : prefix) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_';
    t += ok ? c : '_';
  }
  return "." + t + ".";
}

using ShmTweak = std::function<void(ShmConfig*)>;

// The small knobs that make the chunked and ring-wrapping paths run on small data.
inline void TinyChunks(ShmConfig* c) {
  c->chunk_bytes = 4096;
  c->small_bytes = 64;
  c->ring_bytes = 4096;
}

struct ShmRun {
  std::vector<std::string> failures;
  std::string prefix;
  std::vector<std::string> left_in_dev_shm;  // segments of this run after every rank returned
};

// Creates `size` communicators (one per thread) and runs `body` on each; `after_create`
// (optional) runs on rank 0 once every member is created, before the bodies.
inline ShmRun RunShmRanks(int size, const RankBody& body, const ShmTweak& tweak = nullptr,
                          std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
  MemoryStore store;
  ShmRun run;
  run.prefix = UniquePrefix("run");
  run.failures.resize(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      ShmConfig config;
      config.rank = r;
      config.size = size;
      config.store = &store;
      config.key_prefix = run.prefix;
      config.timeout = timeout;
      if (tweak) tweak(&config);
      auto comm = CreateShmCommunicator(config);
      if (!comm.ok()) {
        run.failures[r] = "rank " + std::to_string(r) + ": create: " + comm.status().ToString();
        return;
      }
      std::string f = body(*comm.value());
      if (!f.empty()) run.failures[r] = "rank " + std::to_string(r) + ": " + f;
    });
  }
  for (auto& t : threads) t.join();
  run.left_in_dev_shm = ShmEntries(SegmentTag(run.prefix));
  return run;
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_SHM_TEST_UTIL_H_
