// The BackendConfig of rank `rank` of `size` processes on this machine (every hostname
// "localhost"), bootstrapping through `store` under `prefix`: what tests of a backend's
// building blocks (mailbox, point-to-point channel) open one per simulated process.
#ifndef HORA_TESTS_HARNESS_LOCAL_CONFIG_H_
#define HORA_TESTS_HARNESS_LOCAL_CONFIG_H_

#include <chrono>
#include <string>

#include "collectives/registry.h"

namespace hora {

inline BackendConfig LocalConfig(int rank, int size, KvStore* store, const std::string& prefix,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  BackendConfig c;
  c.rank = rank;
  for (int r = 0; r < size; ++r) {
    c.global_ranks.push_back(r);
    c.hostnames.push_back("localhost");
  }
  c.store = store;
  c.key_prefix = prefix;
  c.timeout = timeout;
  return c;
}

}  // namespace hora

#endif  // HORA_TESTS_HARNESS_LOCAL_CONFIG_H_
