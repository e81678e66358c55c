// Soak: N small allreduces (default 100,000) over a fixed set of names, every result checked,
// in rounds of 4 in flight at a time (the coordinator fuses them into buckets) and then one
// alone (a bucket of its own every time, so after a few rounds it runs on the steady path),
// waited for and released through the Engine as the C API does. Measures this process's
// resident memory (VmRSS) and thread count after a warm-up and at the end, the Engine's handle
// table at the end, and how many operations ran on the steady path.
//
// Usage (through horarun, any number of ranks): soak_job [N] [WARMUP]
// Prints "SOAK rank=R n=N warm_rss_kib=A end_rss_kib=B growth_kib=B-A threads_init=T0
// threads_warm=T1 threads_end=T2 handles_end=H fast=F seconds=S bad=X" and exits 0 when the result
// checks passed; the test (test_soak.py) judges the numbers.
#include <dirent.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine.h"
#include "runtime/options.h"

namespace {

long RssKib() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atol(line.c_str() + 6);
  }
  return -1;
}

int Threads() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
    closedir(d);
  }
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  using hora::Status;
  const long total = argc > 1 ? std::atol(argv[1]) : 100000;
  const long warmup = argc > 2 ? std::atol(argv[2]) : 10000;
  auto options = hora::OptionsFromEnvironment(hora::OptionOverrides());
  if (!options.ok()) {
    std::printf("FAILED options: %s\n", options.status().ToString().c_str());
    return 3;
  }
  auto started = hora::Engine::Start(options.value());
  if (!started.ok()) {
    std::printf("FAILED start: %s\n", started.status().ToString().c_str());
    return 3;
  }
  std::unique_ptr<hora::Engine> engine = std::move(started).value();
  const int rank = options.value().rank;
  const int size = options.value().size;
  const int threads_init = Threads();
  constexpr int kInFlight = 4;
  constexpr int kElems = 16;
  // Slot kInFlight is the lone operation of each round ("soak.alone").
  std::vector<std::vector<float>> bufs(kInFlight + 1, std::vector<float>(kElems));
  long bad = 0, warm_rss = 0;
  int threads_warm = 0;
  bool warm = false;
  // Enqueues slots [first, last) and waits for them; false (after saying why) on an error.
  auto round = [&](int first, int last) {
    int64_t handles[kInFlight + 1];
    for (int k = first; k < last; ++k) {
      for (int j = 0; j < kElems; ++j) bufs[k][j] = static_cast<float>(rank + j + k);
      hora::TensorSpec spec;
      spec.name = k == kInFlight ? std::string("soak.alone") : "soak." + std::to_string(k);
      spec.dtype = hora::DataType::kFloat32;
      spec.op = hora::ReduceOp::kSum;
      spec.shape = {kElems};
      auto h = engine->Enqueue(spec, bufs[k].data(), bufs[k].data());
      if (!h.ok()) {
        std::printf("FAILED enqueue: %s\n", h.status().ToString().c_str());
        return false;
      }
      handles[k] = h.value();
    }
    for (int k = first; k < last; ++k) {
      Status s = engine->Wait(handles[k], std::chrono::seconds(60));
      if (!s.ok()) {
        std::printf("FAILED wait: %s\n", s.ToString().c_str());
        return false;
      }
      if (Status r = engine->Release(handles[k]); !r.ok()) {
        std::printf("FAILED release: %s\n", r.ToString().c_str());
        return false;
      }
      for (int j = 0; j < kElems; ++j) {
        if (bufs[k][j] != static_cast<float>(size * (j + k) + size * (size - 1) / 2)) ++bad;
      }
    }
    return true;
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (long done = 0; done < total; done += kInFlight + 1) {
    if (!warm && done >= warmup) {
      warm = true;
      warm_rss = RssKib();
      threads_warm = Threads();
    }
    if (!round(0, kInFlight) || !round(kInFlight, kInFlight + 1)) return 3;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long end_rss = RssKib();
  const int threads_end = Threads();
  const size_t handles_end = engine->handles().size();
  auto steady = engine->Steady(hora::kGlobalProcessSet);
  const long long fast = steady.ok() ? static_cast<long long>(steady.value().fast) : -1;
  if (Status s = engine->Shutdown(); !s.ok()) {
    std::printf("FAILED shutdown: %s\n", s.ToString().c_str());
    return 3;
  }
  engine.reset();
  // gRPC's own threads end asynchronously after its last channel goes: give them a moment
  // (a leaked thread never ends, so the test's == 1 still catches it).
  int threads_after = Threads();
  for (int i = 0; i < 200 && threads_after > 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    threads_after = Threads();
  }
  std::printf(
      "SOAK rank=%d n=%ld warm_rss_kib=%ld end_rss_kib=%ld growth_kib=%ld threads_init=%d "
      "threads_warm=%d threads_end=%d threads_after_shutdown=%d handles_end=%zu fast=%lld "
      "seconds=%.1f bad=%ld\n",
      rank, total, warm_rss, end_rss, end_rss - warm_rss, threads_init, threads_warm, threads_end,
      threads_after, handles_end, fast, seconds, bad);
  return bad == 0 ? 0 : 4;
}
