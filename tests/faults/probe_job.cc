// Jobs for the fault tests that need more than fault_job's loop. Uses hora.h only.
//
//   probe_job stall DELAY   Rank 0 submits "stall.lonely"; the other ranks submit it DELAY
//                           seconds later (DELAY < 0: never, they wait for the job's error).
//                           Prints "SUBMITTED rank=0 t=T", then "DONE rank=R" or
//                           "FAILED rank=R t=T status=S msg=M".
//   probe_job loop SECONDS  Allreduces small (inline) and 1 MiB (data plane) tensors with
//                           checked results for at least SECONDS and until the file named by
//                           PROBE_STOP_FILE exists (at most 120 s); all ranks agree on the
//                           stop through the allreduce itself. Rank 0 first prints
//                           "COORDINATOR addr=A token=T". Ends "DONE rank=R iterations=N bad=B".
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bindings/c/hora.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int32_t g_rank = -1;

int Failed(hora_status_t s, const std::string& msg) {
  std::printf("FAILED rank=%d t=%.3f status=%s msg=%s\n", g_rank, Now(), hora_error_string(s),
              msg.c_str());
  std::fflush(stdout);
  hora_shutdown();
  return 3;
}

// Allreduce-sum of `buf` in place under `name`; the status, message in *msg.
hora_status_t AllreduceSum(const char* name, std::vector<float>* buf, std::string* msg) {
  int64_t shape[1] = {static_cast<int64_t>(buf->size())};
  hora_tensor_t t = {buf->data(), shape, 1, HORA_FLOAT32, HORA_DEVICE_CPU, 0, nullptr};
  hora_handle_t h = 0;
  hora_status_t s =
      hora_allreduce_async(name, &t, buf->data(), HORA_SUM, 1, 1, HORA_GLOBAL_PROCESS_SET, &h);
  if (s != HORA_OK) {
    *msg = hora_last_error();
    return s;
  }
  s = hora_wait(h, -1);
  *msg = hora_last_error();
  hora_release(h);
  return s;
}

int Stall(double delay) {
  std::string msg;
  std::vector<float> warm(4, 1.0f);
  hora_status_t s = AllreduceSum("stall.warmup", &warm, &msg);
  if (s != HORA_OK) return Failed(s, msg);
  std::printf("READY rank=%d pid=%d\n", g_rank, static_cast<int>(getpid()));
  std::fflush(stdout);
  std::vector<float> buf(4, 1.0f);
  if (g_rank == 0) {
    std::printf("SUBMITTED rank=0 t=%.3f\n", Now());
    std::fflush(stdout);
    s = AllreduceSum("stall.lonely", &buf, &msg);
  } else if (delay >= 0) {
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    s = AllreduceSum("stall.lonely", &buf, &msg);
  } else {
    // Never submit: wait (bounded) for the job's sticky error, then check that a new
    // operation fails with it too.
    const char* async_msg = nullptr;
    const double deadline = Now() + 60;
    while ((s = hora_async_error(&async_msg)) == HORA_OK && Now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (s == HORA_OK) return Failed(HORA_ERR_INTERNAL, "no job error within 60 s");
    msg = async_msg ? async_msg : "";
    std::string later;
    if (AllreduceSum("stall.after", &buf, &later) != s || later != msg) {
      return Failed(HORA_ERR_INTERNAL,
                    "an operation after the error did not fail with it: " + later);
    }
  }
  if (s != HORA_OK) return Failed(s, msg);
  hora_shutdown();
  std::printf("DONE rank=%d\n", g_rank);
  return 0;
}

int Loop(double min_seconds) {
  int32_t size = 1;
  hora_size(&size);
  const char* stop_file = std::getenv("PROBE_STOP_FILE");
  if (g_rank == 0) {
    const char* addr = std::getenv("HORA_COORDINATOR_ADDR");
    const char* token = std::getenv("HORA_JOB_TOKEN");
    std::printf("COORDINATOR addr=%s token=%s\n", addr ? addr : "", token ? token : "");
  }
  const char* names[4] = {"loop.a", "loop.b", "loop.c", "loop.d"};
  const double start = Now();
  long bad = 0;
  long i = 0;
  for (;; ++i) {
    // Small: inline on the coordinator. Last element: the stop vote.
    std::vector<float> small(16);
    for (size_t k = 0; k < small.size(); ++k) small[k] = static_cast<float>(g_rank + k + i % 7);
    const bool want_stop =
        g_rank == 0 &&
        ((Now() - start >= min_seconds && stop_file != nullptr && access(stop_file, F_OK) == 0) ||
         Now() - start > 120);
    small.back() = want_stop ? 1.0f : 0.0f;
    std::string msg;
    hora_status_t s = AllreduceSum(names[i % 4], &small, &msg);
    if (s != HORA_OK) return Failed(s, msg);
    for (size_t k = 0; k + 1 < small.size(); ++k) {
      const float want = static_cast<float>(size * (k + i % 7) + size * (size - 1) / 2);
      if (small[k] != want) ++bad;
    }
    if (i % 10 == 0) {  // a data-plane allreduce too
      std::vector<float> big(1 << 18, static_cast<float>(g_rank + 1));
      s = AllreduceSum("loop.big", &big, &msg);
      if (s != HORA_OK) return Failed(s, msg);
      const float want = static_cast<float>(size * (size + 1) / 2);
      if (big[0] != want || big[big.size() - 1] != want) ++bad;
    }
    if (i == 0) {
      std::printf("READY rank=%d pid=%d\n", g_rank, static_cast<int>(getpid()));
      std::fflush(stdout);
    }
    if (small.back() > 0) break;
  }
  hora_shutdown();
  std::printf("DONE rank=%d iterations=%ld bad=%ld\n", g_rank, i + 1, bad);
  return bad == 0 ? 0 : 4;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: probe_job stall DELAY | probe_job loop SECONDS\n");
    return 2;
  }
  if (hora_init(nullptr) != HORA_OK) {
    std::printf("FAILED rank=-1 t=%.3f status=INIT msg=%s\n", Now(), hora_last_error());
    return 3;
  }
  hora_rank(&g_rank);
  const std::string mode = argv[1];
  const double arg = std::atof(argv[2]);
  if (mode == "stall") return Stall(arg);
  if (mode == "loop") return Loop(arg);
  return Failed(HORA_ERR_INVALID_ARGUMENT, "unknown mode " + mode);
}
