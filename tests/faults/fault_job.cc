// A job that allreduces 1 MiB tensors in a loop until something goes wrong, for fault tests.
// Prints "READY rank=R pid=P" once running, then on the first error:
//   "FAILED rank=R t=<unix seconds> status=<STATUS> msg=<message>"  and exits 3.
// Arguments: seconds to run before exiting cleanly (default 120); "p2p" to pass 4 MiB
// messages around a ring (send to rank+1, recv from rank-1) instead of allreducing; "steady"
// to allreduce one float under one name, printing READY only once this rank's steady path
// (docs/design.md "Steady state") has run it without the coordinator.
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
  const bool p2p = argc > 2 && std::string(argv[2]) == "p2p";
  const bool steady = argc > 2 && std::string(argv[2]) == "steady";
  if (hora_init(nullptr) != HORA_OK) {
    std::printf("FAILED rank=-1 t=%.3f status=INIT msg=%s\n", Now(), hora_last_error());
    return 3;
  }
  int32_t rank = 0, size = 1;
  hora_rank(&rank);
  hora_size(&size);
  std::vector<float> buf(p2p ? 1 << 20 : steady ? 1 : 1 << 18, 1.0f), in(buf.size());
  int64_t shape[1] = {static_cast<int64_t>(buf.size())};
  hora_tensor_t t = {buf.data(), shape, 1, HORA_FLOAT32, HORA_DEVICE_CPU, 0, nullptr};
  double start = Now();
  bool ready = false, announced = false;
  for (long i = 0;; ++i) {
    hora_handle_t h = 0, r = 0;
    hora_status_t s;
    if (p2p) {
      hora_tensor_t t_in = {in.data(), shape, 1, HORA_FLOAT32, HORA_DEVICE_CPU, 0, nullptr};
      s = hora_recv_async(&t_in, (rank + size - 1) % size, 0, HORA_GLOBAL_PROCESS_SET, &r);
      if (s != HORA_OK) return Report(rank, s, hora_last_error());
      s = hora_send_async(&t, (rank + 1) % size, 0, HORA_GLOBAL_PROCESS_SET, &h);
    } else {
      s = hora_allreduce_async(steady ? "fault.steady" : "fault.grad", &t, buf.data(), HORA_AVERAGE,
                               1, 1, HORA_GLOBAL_PROCESS_SET, &h);
    }
    if (s != HORA_OK) return Report(rank, s, hora_last_error());
    if (p2p) {  // the receive names the sender when the sender dies
      s = hora_wait(r, -1);
      std::string msg = hora_last_error();
      hora_release(r);
      if (s != HORA_OK) return Report(rank, s, msg);
    }
    s = hora_wait(h, -1);
    std::string msg = hora_last_error();  // valid until this thread's next Hora call
    hora_release(h);
    if (s != HORA_OK) return Report(rank, s, msg);
    if (!ready && steady) {
      int64_t fast = 0;
      if (hora_steady_stats(HORA_GLOBAL_PROCESS_SET, &fast, nullptr, nullptr) != HORA_OK) {
        return Report(rank, HORA_ERR_INTERNAL, hora_last_error());
      }
      if (fast == 0 && i > 1000) {
        return Report(rank, HORA_ERR_INTERNAL, "the steady path never ran fault.steady");
      }
      ready = fast > 0;
      if (ready) std::printf("FAST rank=%d after=%ld\n", rank, i);
    } else {
      ready = true;
    }
    if (ready && !announced) {
      announced = true;
      std::printf("READY rank=%d pid=%d\n", rank, static_cast<int>(getpid()));
      std::fflush(stdout);
    }
    if (Now() - start > run_for) break;
  }
  hora_shutdown();
  std::printf("DONE rank=%d\n", rank);
  return 0;
}
