#include "collectives/gloo/kv_store_adapter.h"

#include <gloo/common/error.h>

#include <utility>

namespace hora {

KvStoreAdapter::KvStoreAdapter(KvStore* store, std::string prefix,
                               std::chrono::milliseconds timeout)
    : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

void KvStoreAdapter::set(const std::string& key, const std::vector<char>& data) {
  Status s = store_->Set(prefix_ + key, std::string(data.begin(), data.end()));
  if (!s.ok()) {
    if (error_.ok()) error_ = s;
    throw gloo::IoException("store set of key '" + prefix_ + key + "' failed: " + s.ToString());
  }
}

std::string KvStoreAdapter::Fetch(const std::string& key, std::chrono::milliseconds timeout) {
  StatusOr<std::string> v = store_->Get(prefix_ + key, timeout);
  if (!v.ok()) {
    if (error_.ok()) error_ = v.status();
    throw gloo::IoException("store get of key '" + prefix_ + key +
                            "' failed: " + v.status().ToString());
  }
  return std::move(v).value();
}

std::vector<char> KvStoreAdapter::get(const std::string& key) {
  std::string v = Fetch(key, timeout_);
  return std::vector<char>(v.begin(), v.end());
}

void KvStoreAdapter::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void KvStoreAdapter::wait(const std::vector<std::string>& keys,
                          const std::chrono::milliseconds& timeout) {
  // One deadline for all keys. Gloo passes kNoTimeout (0) to mean "no limit": we still bound.
  const auto budget = timeout.count() > 0 ? timeout : timeout_;
  const auto deadline = std::chrono::steady_clock::now() + budget;
  for (const std::string& key : keys) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    Fetch(key, left);
  }
}

}  // namespace hora
