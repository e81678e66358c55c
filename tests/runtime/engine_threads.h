// Engines as threads in one process, for runtime tests: a real coordinator, real gRPC and
// real backends, one Engine per thread.
#ifndef HORA_TESTS_RUNTIME_ENGINE_THREADS_H_
#define HORA_TESTS_RUNTIME_ENGINE_THREADS_H_

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"

namespace hora {
namespace testing {

inline int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

inline Options MakeOptions(int rank, int size, int port) {
  Options o;
  o.rank = rank;
  o.size = size;
  o.coordinator_address = "127.0.0.1:" + std::to_string(port);
  o.token = "engine-test-token";
  o.hostname = "host" + std::to_string(rank % 2);
  o.start_timeout_s = 30;
  o.heartbeat_timeout_s = 10;
  o.collective_timeout_s = 10;
  o.fusion_threshold_bytes = 4096;  // small: buckets split often
  if (const char* l = std::getenv("HORA_TEST_LOG_LEVEL")) o.log_level = l;
  return o;
}

// Runs body(rank, engine) on `size` threads; returns each rank's failure text ("" = ok).
inline std::vector<std::string> RunRanks(int size,
                                         const std::function<std::string(int, Engine&)>& body,
                                         const std::function<void(Options*)>& tweak = nullptr) {
  int port = FreePort();
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      Options o = MakeOptions(r, size, port);
      if (tweak) tweak(&o);
      auto engine = Engine::Start(o);
      if (!engine.ok()) {
        errors[r] = "start: " + engine.status().ToString();
        return;
      }
      errors[r] = body(r, *engine.value());
      Status down = engine.value()->Shutdown();
      if (!down.ok() && errors[r].empty()) errors[r] = "shutdown: " + down.ToString();
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline StatusOr<int64_t> Allreduce(Engine& e, const std::string& name, std::vector<float>* buf,
                                   ReduceOp op, int32_t process_set = kGlobalProcessSet) {
  TensorSpec spec;
  spec.process_set = process_set;
  spec.name = name;
  spec.dtype = DataType::kFloat32;
  spec.op = op;
  spec.shape = {static_cast<int64_t>(buf->size())};
  return e.Enqueue(spec, buf->data(), buf->data());
}

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_RUNTIME_ENGINE_THREADS_H_
