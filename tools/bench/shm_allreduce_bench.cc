// Allreduce on the shm communicator next to the Gloo communicator, measured in the same run:
// the data plane alone (no runtime, no coordinator), one process per rank.
//
//   bazel-bin/tools/bench/shm_allreduce_bench --np 2 [--min-bytes 4] [--max-bytes 256M]
//       [--step-factor 4] [--target-seconds 0.5] [--backends shm,gloo] [--lat-iters 5000]
//       [--chunk-bytes N] [--small-bytes N] [--spin-us N] [--csv]
//
// tools/bench/shm_run_bench.sh runs it for 2 and 4 ranks next to Open MPI and writes the
// report (docs/benchmarks-shm.md).
// The parent forks --np ranks and waits for them; they bootstrap through files in a temporary
// directory. For every size (float32 sum, in place) and backend a rank fills its buffer, runs
// one allreduce and checks every element (exit 1 on a wrong result), warms up, picks an
// iteration count so that the size takes about --target-seconds (the same count on every
// rank), and times that many back-to-back allreduces. time = per operation on the slowest
// rank; algbw = bytes / time; busbw = algbw * 2 (n - 1) / n (nccl-tests' convention), GB/s
// = 1e9 B/s. Then the latency of a 4-byte allreduce: median and p90 of --lat-iters single
// operations, each timed alone.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/gloo/gloo_communicator.h"
#include "collectives/shm/shm_communicator.h"
#include "tests/collectives/shm_file_store.h"

namespace {

using hora::Communicator;
using hora::DataType;
using hora::ReduceOp;
using hora::Status;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Flags {
  int np = 2;
  int64_t min_bytes = 4;
  int64_t max_bytes = int64_t{256} << 20;
  int64_t step_factor = 4;
  double target_seconds = 0.5;
  int64_t max_iters = 200000;
  int64_t lat_iters = 5000;
  std::vector<std::string> backends = {"shm", "gloo"};
  size_t chunk_bytes = 0, small_bytes = 0;
  int spin_us = -1;
  bool csv = false;
};

int64_t ParseBytes(const char* v) {
  char* end = nullptr;
  double x = std::strtod(v, &end);
  int64_t mult = 1;
  if (end && (*end == 'k' || *end == 'K')) mult = 1 << 10;
  if (end && (*end == 'm' || *end == 'M')) mult = 1 << 20;
  if (end && (*end == 'g' || *end == 'G')) mult = 1 << 30;
  return static_cast<int64_t>(x * mult);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--np")
      f.np = std::atoi(value());
    else if (a == "--min-bytes")
      f.min_bytes = ParseBytes(value());
    else if (a == "--max-bytes")
      f.max_bytes = ParseBytes(value());
    else if (a == "--step-factor")
      f.step_factor = std::atoll(value());
    else if (a == "--target-seconds")
      f.target_seconds = std::atof(value());
    else if (a == "--max-iters")
      f.max_iters = std::atoll(value());
    else if (a == "--lat-iters")
      f.lat_iters = std::atoll(value());
    else if (a == "--chunk-bytes")
      f.chunk_bytes = static_cast<size_t>(ParseBytes(value()));
    else if (a == "--small-bytes")
      f.small_bytes = static_cast<size_t>(ParseBytes(value()));
    else if (a == "--spin-us")
      f.spin_us = std::atoi(value());
    else if (a == "--csv")
      f.csv = true;
    else if (a == "--backends") {
      f.backends.clear();
      std::string list = value();
      for (size_t p = 0; p <= list.size();) {
        size_t q = list.find(',', p);
        if (q == std::string::npos) q = list.size();
        if (q > p) f.backends.push_back(list.substr(p, q - p));
        p = q + 1;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  f.min_bytes = std::max<int64_t>(4, f.min_bytes);
  f.step_factor = std::max<int64_t>(2, f.step_factor);
  return f;
}

int g_rank = 0;

void Must(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "rank %d: %s: %s\n", g_rank, what, s.ToString().c_str());
  std::exit(2);
}

double MaxOverRanks(Communicator& c, double x) {
  Must(c.Allreduce(&x, 1, DataType::kFloat64, ReduceOp::kMax), "max over ranks");
  return x;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

// Seconds per allreduce of `bytes` on the slowest rank; *wrong counts bad elements (all ranks).
double Measure(const Flags& f, Communicator& c, int64_t bytes, int64_t* wrong) {
  const size_t count = static_cast<size_t>(bytes / 4);
  std::vector<float> buf(count);
  const int n = c.size();
  for (size_t i = 0; i < count; ++i) buf[i] = static_cast<float>(i % 13 + g_rank + 1);
  double t0 = Now();
  Must(c.Allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum), "allreduce");
  const double first = Now() - t0;
  int64_t bad = 0;
  for (size_t i = 0; i < count; ++i) {
    if (buf[i] != static_cast<float>(n * (i % 13) + n * (n + 1) / 2)) ++bad;
  }
  *wrong += static_cast<int64_t>(MaxOverRanks(c, static_cast<double>(bad)));
  // Warm up in growing batches until one takes ~1/5 of the target; every rank agrees on the
  // slowest estimate so that all run the same number of operations.
  double est = MaxOverRanks(c, first);
  for (int64_t batch = 1;; batch *= 4) {
    t0 = Now();
    for (int64_t i = 0; i < batch; ++i) {
      Must(c.Allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum), "allreduce");
    }
    const double took = MaxOverRanks(c, Now() - t0);
    est = took / batch;
    if (took >= f.target_seconds / 5 || batch >= f.max_iters) break;
  }
  const int64_t iters = std::max<int64_t>(
      3,
      std::min<int64_t>(f.max_iters, static_cast<int64_t>(f.target_seconds / std::max(est, 1e-8))));
  Must(c.Barrier(), "barrier");
  t0 = Now();
  for (int64_t i = 0; i < iters; ++i) {
    Must(c.Allreduce(buf.data(), count, DataType::kFloat32, ReduceOp::kSum), "allreduce");
  }
  return MaxOverRanks(c, (Now() - t0) / iters);
}

void Latency(const Flags& f, Communicator& c, double* p50, double* p90) {
  float v = 1;
  for (int i = 0; i < 200; ++i) Must(c.Allreduce(&v, 1, DataType::kFloat32, ReduceOp::kSum), "lat");
  std::vector<double> t(static_cast<size_t>(std::max<int64_t>(10, f.lat_iters)));
  Must(c.Barrier(), "barrier");
  for (double& x : t) {
    v = 1;
    const double a = Now();
    Must(c.Allreduce(&v, 1, DataType::kFloat32, ReduceOp::kSum), "lat");
    x = (Now() - a) * 1e6;
  }
  *p50 = MaxOverRanks(c, Percentile(t, 0.5));
  *p90 = MaxOverRanks(c, Percentile(t, 0.9));
}

int RunRank(const Flags& f, int rank, const std::string& dir) {
  g_rank = rank;
  hora::testing::FileStore store(dir);
  std::map<std::string, std::unique_ptr<Communicator>> comms;
  for (const std::string& b : f.backends) {
    if (b == "shm") {
      hora::ShmConfig c;
      c.rank = rank;
      c.size = f.np;
      c.store = &store;
      c.key_prefix = "bench/shm/";
      c.chunk_bytes = f.chunk_bytes;
      c.small_bytes = f.small_bytes;
      c.spin_us = f.spin_us;
      auto comm = hora::CreateShmCommunicator(c);
      Must(comm.status(), "create shm");
      comms[b] = std::move(comm).value();
    } else if (b == "gloo") {
      hora::GlooConfig c;
      c.rank = rank;
      c.size = f.np;
      c.store = &store;
      c.key_prefix = "bench/gloo/";
      auto comm = hora::CreateGlooCommunicator(c);
      Must(comm.status(), "create gloo");
      comms[b] = std::move(comm).value();
    } else {
      std::fprintf(stderr, "unknown backend %s\n", b.c_str());
      return 2;
    }
  }
  const std::string& first = f.backends.front();
  const std::string& second = f.backends.size() > 1 ? f.backends[1] : first;
  const double bus = 2.0 * (f.np - 1) / f.np;
  if (rank == 0) {
    if (f.csv) {
      std::printf("bytes,%s_us,%s_busbw,%s_us,%s_busbw,ratio\n", first.c_str(), first.c_str(),
                  second.c_str(), second.c_str());
    } else {
      std::printf("# allreduce float32 sum in place, %d ranks (processes), %s vs %s\n", f.np,
                  first.c_str(), second.c_str());
      std::printf("# %11s %12s %11s %12s %11s %8s\n", "bytes", (first + " us").c_str(),
                  "busbw GB/s", (second + " us").c_str(), "busbw GB/s", "ratio");
    }
    std::fflush(stdout);
  }
  int64_t wrong = 0;
  for (int64_t bytes = f.min_bytes; bytes <= f.max_bytes; bytes *= f.step_factor) {
    const double a = Measure(f, *comms[first], bytes, &wrong);
    const double b = second == first ? a : Measure(f, *comms[second], bytes, &wrong);
    if (rank == 0) {
      const double bwa = bytes / a / 1e9 * bus, bwb = bytes / b / 1e9 * bus;
      std::printf(f.csv ? "%lld,%.2f,%.3f,%.2f,%.3f,%.2f\n"
                        : "  %11lld %12.2f %11.3f %12.2f %11.3f %8.2f\n",
                  static_cast<long long>(bytes), a * 1e6, bwa, b * 1e6, bwb, b / a);
      std::fflush(stdout);
    }
  }
  for (const std::string& b : f.backends) {
    double p50 = 0, p90 = 0;
    Latency(f, *comms[b], &p50, &p90);
    if (rank == 0 && f.csv) {
      std::printf("lat,%s,%lld,%.3f,%.3f\n", b.c_str(), static_cast<long long>(f.lat_iters), p50,
                  p90);
    } else if (rank == 0) {
      std::printf(
          "# %s 4-byte allreduce latency over %lld operations: median %.2f us, p90 %.2f us\n",
          b.c_str(), static_cast<long long>(f.lat_iters), p50, p90);
    }
  }
  if (rank == 0) std::printf("# wrong elements: %lld\n", static_cast<long long>(wrong));
  std::fflush(stdout);
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  char tmpl[] = "/tmp/hora-shm-bench-XXXXXX";
  const char* dir = mkdtemp(tmpl);
  if (dir == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  std::vector<pid_t> children;
  for (int r = 0; r < f.np; ++r) {
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 2;
    }
    if (pid == 0) {
      const int rc = RunRank(f, r, dir);
      std::fflush(stdout);
      _exit(rc);
    }
    children.push_back(pid);
  }
  int rc = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  std::system((std::string("rm -rf ") + dir).c_str());
  return rc;
}
