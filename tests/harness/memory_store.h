// An in-memory KvStore for tests that run ranks as threads in one process.
#ifndef HORA_TESTS_HARNESS_MEMORY_STORE_H_
#define HORA_TESTS_HARNESS_MEMORY_STORE_H_

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "common/kv_store.h"

namespace hora {

class MemoryStore : public KvStore {
 public:
  Status Set(const std::string& key, const std::string& value) override {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
    cv_.notify_all();
    return Status::Ok();
  }

  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return data_.count(key) > 0; })) {
      return DeadlineExceeded("key '" + key + "' was not set within " +
                              std::to_string(timeout.count()) + " ms");
    }
    return data_[key];
  }

  Status Delete(const std::string& key) override {
    std::lock_guard<std::mutex> lock(mu_);
    data_.erase(key);
    return Status::Ok();
  }

  size_t size() {
    std::lock_guard<std::mutex> lock(mu_);
    return data_.size();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> data_;
};

}  // namespace hora

#endif  // HORA_TESTS_HARNESS_MEMORY_STORE_H_
