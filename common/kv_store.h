// A key-value store with deadlines: how data-plane backends bootstrap (Gloo exchanges its
// addresses through it; the loopback test backend moves its data through it). The coordinator
// client implements it over gRPC; tests use an in-memory one (tests/harness/memory_store.h).
#ifndef HORA_COMMON_KV_STORE_H_
#define HORA_COMMON_KV_STORE_H_

#include <chrono>
#include <string>

#include "common/status.h"

namespace hora {

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Thread-safe. Overwrites an existing key.
  virtual Status Set(const std::string& key, const std::string& value) = 0;
  // Blocks until the key is set or the timeout passes (DEADLINE_EXCEEDED naming the key).
  virtual StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Thread-safe. Removes the key if it is set (no error when it is not).
  virtual Status Delete(const std::string& key) = 0;
};

}  // namespace hora

#endif  // HORA_COMMON_KV_STORE_H_
