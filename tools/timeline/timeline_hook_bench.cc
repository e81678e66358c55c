// What the timeline costs per tensor, without a job: the hooks one tensor goes through
// (Submitted, Planned, BucketDone of a one-tensor bucket) on the calling thread, and the
// process CPU time per tensor including the writer thread's formatting and writing.
//
//   bazel-bin/tools/timeline/timeline_hook_bench [tensors] [file]
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/timeline.h"

namespace {

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 200000;
  const std::string path = argc > 2 ? argv[2] : "/tmp/hora_timeline_hook_bench.json";
  hora::Timeline t;
  hora::TensorSpec spec;
  spec.shape = {1000};
  hora::Status s = t.Start(path, 0, "bench", 0);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    spec.name = "model.layer" + std::to_string(i % 100) + ".weight";
    const int64_t now = hora::TimelineNowUs();
    if (t.on()) t.Submitted(i + 1, spec, now);
    if (t.on()) t.Planned({{0, static_cast<uint64_t>(i)}}, now + 1);
    hora::TimelineBucket b;
    b.seq = i;
    b.backend = "gloo";
    b.bytes = 4000;
    b.tensors.push_back({i + 1, 4000, 1, 10, 5});
    b.start_us = now + 2;
    b.collective_us = now + 3;
    b.collective_done_us = now + 4;
    b.unpacked_us = now + 5;
    b.completed_us = now + 6;
    if (t.on()) t.BucketDone(std::move(b));
  }
  const auto t1 = std::chrono::steady_clock::now();
  const hora::Status stopped = t.Stop();
  const auto t2 = std::chrono::steady_clock::now();
  if (!stopped.ok()) {
    std::fprintf(stderr, "%s\n", stopped.message().c_str());
    return 1;
  }
  const double cpu = CpuSeconds() - cpu0;
  const double us = std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
  const double all = std::chrono::duration<double, std::micro>(t2 - t0).count() / n;
  std::printf(
      "%d tensors: hooks %.2f us per tensor on the calling thread; until written %.2f us; "
      "process CPU %.2f us per tensor (writer included)\n",
      n, us, all, cpu * 1e6 / n);
  std::remove(path.c_str());
  return 0;
}
