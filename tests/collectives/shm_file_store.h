// A KvStore over files in one directory, for ranks that are separate processes on one host
// (the shm fault tests fork a rank; tools/bench/shm_allreduce_bench forks every rank).
// Set writes a temporary file and renames it into place, so a reader sees a whole value or
// none; Get polls every 200 us until the key exists or the timeout passes.
#ifndef HORA_TESTS_COLLECTIVES_SHM_FILE_STORE_H_
#define HORA_TESTS_COLLECTIVES_SHM_FILE_STORE_H_

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/kv_store.h"

namespace hora {
namespace testing {

class FileStore : public KvStore {
 public:
  explicit FileStore(std::string dir) : dir_(std::move(dir)) {}

  Status Set(const std::string& key, const std::string& value) override {
    const std::string path = Path(key);
    const std::string tmp = path + ".tmp." + std::to_string(getpid());
    {
      std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
      out << value;
      if (!out) return Unavailable("file store: cannot write " + tmp);
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return Unavailable("file store: cannot rename " + tmp);
    }
    return Status::Ok();
  }

  StatusOr<std::string> Get(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      std::ifstream in(Path(key), std::ios::binary);
      if (in) {
        std::stringstream ss;
        ss << in.rdbuf();
        return ss.str();
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        return DeadlineExceeded("key '" + key + "' was not set within " +
                                std::to_string(timeout.count()) + " ms");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  Status Delete(const std::string& key) override {
    std::remove(Path(key).c_str());
    return Status::Ok();
  }

 private:
  // Keys contain '/': flatten them into one file name.
  std::string Path(const std::string& key) const {
    std::string flat = key;
    for (char& c : flat) {
      if (c == '/') c = '%';
    }
    return dir_ + "/" + flat;
  }

  const std::string dir_;
};

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COLLECTIVES_SHM_FILE_STORE_H_
