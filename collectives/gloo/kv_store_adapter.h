// Adapts Hora's KvStore (deadline-aware) to gloo::rendezvous::Store, which Gloo's
// rendezvous Context uses to exchange addresses. Internal to the gloo backend.
#ifndef HORA_COLLECTIVES_GLOO_KV_STORE_ADAPTER_H_
#define HORA_COLLECTIVES_GLOO_KV_STORE_ADAPTER_H_

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/kv_store.h"
#include "common/status.h"

namespace hora {

// Every key is prefixed with `prefix`. Every blocking call is bounded by `timeout` (or the
// timeout Gloo passes to wait): on expiry it throws gloo::IoException, as Gloo's own stores
// do, and remembers the KvStore's Status so the caller can report the real cause.
// Not thread-safe (Gloo drives it from the thread that connects).
class KvStoreAdapter : public gloo::rendezvous::Store {
 public:
  KvStoreAdapter(KvStore* store, std::string prefix, std::chrono::milliseconds timeout);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The first failure of the underlying store, or OK.
  const Status& error() const { return error_; }

 private:
  // Fetches `key` within `timeout`; throws gloo::IoException on failure.
  std::string Fetch(const std::string& key, std::chrono::milliseconds timeout);

  KvStore* const store_;
  const std::string prefix_;
  const std::chrono::milliseconds timeout_;
  Status error_;
};

}  // namespace hora

#endif  // HORA_COLLECTIVES_GLOO_KV_STORE_ADAPTER_H_
