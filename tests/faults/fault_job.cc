// A job that allreduces 1 MiB tensors in a loop until something goes wrong, for fault tests.
// Prints "READY rank=R pid=P" once running, then on the first error:
//   "FAILED rank=R t=<unix seconds> status=<STATUS> msg=<message>"  and exits 3.
// Argument: seconds to run before exiting cleanly (default 120).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bindings/c/hora.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int Report(int rank, hora_status_t s, const std::string& msg) {
  std::printf("FAILED rank=%d t=%.3f status=%s msg=%s\n", rank, Now(), hora_error_string(s),
              msg.c_str());
  std::fflush(stdout);
  hora_shutdown();
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  double run_for = argc > 1 ? std::atof(argv[1]) : 120;
  if (hora_init(nullptr) != HORA_OK) {
    std::printf("FAILED rank=-1 t=%.3f status=INIT msg=%s\n", Now(), hora_last_error());
    return 3;
  }
  int32_t rank = 0;
  hora_rank(&rank);
  std::vector<float> buf(1 << 18, 1.0f);
  int64_t shape[1] = {static_cast<int64_t>(buf.size())};
  hora_tensor_t t = {buf.data(), shape, 1, HORA_FLOAT32, HORA_DEVICE_CPU, 0, nullptr};
  double start = Now();
  for (long i = 0;; ++i) {
    hora_handle_t h = 0;
    hora_status_t s = hora_allreduce_async("fault.grad", &t, buf.data(), HORA_AVERAGE, 1, 1, HORA_GLOBAL_PROCESS_SET, &h);
    if (s != HORA_OK) return Report(rank, s, hora_last_error());
    s = hora_wait(h, -1);
    std::string msg = hora_last_error();  // valid until this thread's next Hora call
    hora_release(h);
    if (s != HORA_OK) return Report(rank, s, msg);
    if (i == 0) {
      std::printf("READY rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
      std::fflush(stdout);
    }
    if (Now() - start > run_for) break;
  }
  hora_shutdown();
  std::printf("DONE rank=%d\n", rank);
  return 0;
}
