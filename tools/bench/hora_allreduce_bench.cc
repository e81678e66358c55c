// Allreduce benchmark through the whole Hora runtime (enqueue, negotiation with the
// coordinator, Gloo data plane, completion), using only the public C API (hora.h).
//
// Run one process per rank under horarun:
//   tools/launcher/horarun -np 2 bazel-bin/tools/bench/hora_allreduce_bench [--csv]
//
// For every size (float32, sum, in place, one fixed tensor name per size) it fills the buffer
// with real values, runs one allreduce and checks the result (exit 1 on a wrong result), warms
// up, picks an iteration count so the size takes about --target-seconds, and times that many
// back-to-back allreduce + wait + release. Columns as in nccl-tests: time per operation in us
// (the slowest rank), algbw = bytes / time, busbw = algbw * 2 (n - 1) / n, in GB/s (1e9 B/s).
// Then the latency of a 4-byte allreduce from enqueue to done (median and p90 over
// --lat-iters iterations), with the time spent in the enqueue call itself.
//
// Flags: --min-bytes N (4) --max-bytes N (256 MiB) --step-factor F (4) --target-seconds S
// (0.6) --max-iters N (100000) --lat-iters N (2000) --lat-mode wait|poll|both (wait) --debug
// --no-latency --no-bandwidth --csv --impl NAME (the CSV rows' implementation, default "hora")
// --deterministic env|off|on|both (env: HORA_DETERMINISTIC decides; both: the whole run with
// it off, then on, --rounds times, hora_init / hora_shutdown in between: rows "NAME" and
// "NAME-deterministic" side by side) --rounds N (1).
// Sizes accept K, M, G suffixes (powers of 1024).
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bindings/c/hora.h"

namespace {

using Clock = std::chrono::steady_clock;

double Now() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

struct Flags {
  int64_t min_bytes = 4;
  int64_t max_bytes = 256ll << 20;
  int64_t step_factor = 4;
  double target_seconds = 0.6;
  int64_t max_iters = 100000;
  int64_t min_iters = 3;
  int64_t lat_iters = 2000;
  std::string lat_mode = "wait";
  bool latency = true;
  bool bandwidth = true;
  bool csv = false;
  std::string deterministic = "env";
  int64_t rounds = 1;
};

int g_rank = 0;
int g_size = 1;

[[noreturn]] void Die(const char* what, hora_status_t s) {
  std::fprintf(stderr, "rank %d: %s failed: %s: %s\n", g_rank, what, hora_error_string(s),
               hora_last_error());
  std::exit(2);
}

void Must(hora_status_t s, const char* what) {
  if (s != HORA_OK) Die(what, s);
}

int64_t ParseBytes(const char* flag, const char* v) {
  char* end = nullptr;
  double x = std::strtod(v, &end);
  int64_t mult = 1;
  if (end && *end) {
    switch (*end) {
      case 'k':
      case 'K':
        mult = 1ll << 10;
        break;
      case 'm':
      case 'M':
        mult = 1ll << 20;
        break;
      case 'g':
      case 'G':
        mult = 1ll << 30;
        break;
      default:
        std::fprintf(stderr, "%s: bad size '%s'\n", flag, v);
        std::exit(2);
    }
  }
  if (!(x >= 0)) {
    std::fprintf(stderr, "%s: bad size '%s'\n", flag, v);
    std::exit(2);
  }
  return static_cast<int64_t>(x * mult);
}

// --debug: print every rank's contribution to MaxOverRanks.
bool g_debug = false;
std::string g_impl = "hora";  // --impl: the CSV rows' implementation name

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--csv")
      f.csv = true;
    else if (a == "--no-latency")
      f.latency = false;
    else if (a == "--no-bandwidth")
      f.bandwidth = false;
    else if (a == "--min-bytes")
      f.min_bytes = ParseBytes("--min-bytes", value());
    else if (a == "--max-bytes")
      f.max_bytes = ParseBytes("--max-bytes", value());
    else if (a == "--step-factor")
      f.step_factor = std::atoll(value());
    else if (a == "--target-seconds")
      f.target_seconds = std::atof(value());
    else if (a == "--max-iters")
      f.max_iters = std::atoll(value());
    else if (a == "--min-iters")
      f.min_iters = std::atoll(value());
    else if (a == "--lat-iters")
      f.lat_iters = std::atoll(value());
    else if (a == "--lat-mode")
      f.lat_mode = value();
    else if (a == "--debug")
      g_debug = true;
    else if (a == "--impl")
      g_impl = value();
    else if (a == "--deterministic")
      f.deterministic = value();
    else if (a == "--rounds")
      f.rounds = std::atoll(value());
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      std::exit(2);
    }
  }
  if (f.min_bytes < 4) f.min_bytes = 4;
  if (f.step_factor < 2) f.step_factor = 2;
  if (f.min_iters < 1) f.min_iters = 1;
  if (f.deterministic != "env" && f.deterministic != "off" && f.deterministic != "on" &&
      f.deterministic != "both") {
    std::fprintf(stderr, "--deterministic must be env, off, on or both\n");
    std::exit(2);
  }
  if (f.rounds < 1) f.rounds = 1;
  if (f.lat_mode != "wait" && f.lat_mode != "poll" && f.lat_mode != "both") {
    std::fprintf(stderr, "--lat-mode must be wait, poll or both\n");
    std::exit(2);
  }
  return f;
}

hora_tensor_t Tensor(void* data, const int64_t* shape, hora_dtype_t dtype = HORA_FLOAT32) {
  hora_tensor_t t;
  std::memset(&t, 0, sizeof(t));
  t.data = data;
  t.shape = shape;
  t.ndim = 1;
  t.dtype = dtype;
  t.device = HORA_DEVICE_CPU;
  return t;
}

// One allreduce of buf, waited for with hora_wait (blocking) or by spinning on hora_poll.
void Allreduce(const char* name, void* buf, int64_t count, hora_reduce_op_t op, bool poll = false,
               hora_dtype_t dtype = HORA_FLOAT32) {
  int64_t shape[1] = {count};
  hora_tensor_t t = Tensor(buf, shape, dtype);
  hora_handle_t h = 0;
  Must(hora_allreduce_async(name, &t, buf, op, 1.0, 1.0, HORA_GLOBAL_PROCESS_SET, &h), name);
  if (poll) {
    int done = 0;
    while (!done) Must(hora_poll(h, &done), "hora_poll");
  }
  Must(hora_wait(h, -1), name);
  Must(hora_release(h), "hora_release");
}

// The largest value of x over the ranks (every rank gets it).
double MaxOverRanks(double x) {
  double v = x;
  Allreduce("bench.max", &v, 1, HORA_MAX, false, HORA_FLOAT64);
  if (g_debug) std::fprintf(stderr, "rank %d: max(%.9g) = %.9g\n", g_rank, x, v);
  return v;
}

void Barrier() {
  hora_handle_t h = 0;
  Must(hora_barrier_async(HORA_GLOBAL_PROCESS_SET, &h), "hora_barrier_async");
  Must(hora_wait(h, -1), "barrier");
  Must(hora_release(h), "hora_release");
}

// Rank r holds (i % 13) + r + 1 at element i; the sum over n ranks is exact in float32.
void Fill(std::vector<float>* buf) {
  for (size_t i = 0; i < buf->size(); ++i) (*buf)[i] = static_cast<float>(i % 13 + g_rank + 1);
}

int64_t CountWrong(const std::vector<float>& buf) {
  int64_t wrong = 0;
  const double base = g_size * (g_size + 1) / 2.0;
  for (size_t i = 0; i < buf.size(); ++i) {
    double want = g_size * static_cast<double>(i % 13) + base;
    if (buf[i] != static_cast<float>(want)) {
      if (wrong < 3) {
        std::fprintf(stderr, "rank %d: element %zu is %g, want %g\n", g_rank, i,
                     static_cast<double>(buf[i]), want);
      }
      ++wrong;
    }
  }
  return wrong;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t k = static_cast<size_t>(std::max(1.0, std::ceil(p * v.size()))) - 1;
  return v[std::min(k, v.size() - 1)];
}

void PrintHeader(const Flags& f) {
  if (f.csv) {
    std::printf(
        "kind,impl,np,bytes,count,type,op,iters,time_us,algbw_gbs,busbw_gbs,p50_us,p90_us,"
        "min_us,extra_us,wrong\n");
  } else {
    std::printf("# hora allreduce benchmark, %d ranks, float32 sum, in place (%s)\n", g_size,
                hora_version());
    std::printf("#%12s %12s %8s %6s %8s %11s %9s %9s %7s\n", "size", "count", "type", "redop",
                "iters", "time", "algbw", "busbw", "#wrong");
    std::printf("#%12s %12s %8s %6s %8s %11s %9s %9s %7s\n", "(B)", "(elements)", "", "", "",
                "(us)", "(GB/s)", "(GB/s)", "");
  }
  std::fflush(stdout);
}

// Returns the number of wrong elements found (over all ranks).
int64_t BenchSize(const Flags& f, int64_t bytes) {
  const int64_t count = bytes / 4;
  std::vector<float> buf(static_cast<size_t>(count));
  Fill(&buf);
  const std::string name = "bench.allreduce." + std::to_string(bytes);

  double t0 = Now();
  Allreduce(name.c_str(), buf.data(), count, HORA_SUM);
  double first = MaxOverRanks(Now() - t0);  // every rank must pick the same batch sizes
  int64_t wrong = static_cast<int64_t>(MaxOverRanks(static_cast<double>(CountWrong(buf))));

  // Warm up (the first run above paid for the first negotiation), and estimate the time of one
  // operation. Every rank must run the same number of iterations: agree on the slowest.
  // Warm-up in batches that every rank runs alike (each operation is matched by name and
  // order), growing until a batch takes about a quarter of the target time (0.15 s at most);
  // the last batch estimates the time of one operation, on the slowest rank.
  const double window = std::min(0.15, f.target_seconds / 4);
  int64_t batch = first > 0.05 ? 1 : 5;
  double est = first;
  for (;;) {
    t0 = Now();
    for (int64_t i = 0; i < batch; ++i) Allreduce(name.c_str(), buf.data(), count, HORA_SUM);
    double elapsed = MaxOverRanks(Now() - t0);
    est = elapsed / batch;
    if (elapsed >= window || batch >= f.max_iters) break;
    double grow = std::ceil(batch * 1.2 * window / std::max(elapsed, 1e-9));
    batch = std::max(2 * batch, std::min(16 * batch, static_cast<int64_t>(grow)));
  }
  int64_t iters = static_cast<int64_t>(std::ceil(f.target_seconds / std::max(est, 1e-7)));
  iters = std::max(f.min_iters, std::min(f.max_iters, iters));

  Barrier();
  t0 = Now();
  for (int64_t i = 0; i < iters; ++i) Allreduce(name.c_str(), buf.data(), count, HORA_SUM);
  double per_op = MaxOverRanks((Now() - t0) / iters);

  double algbw = bytes / per_op / 1e9;
  double busbw = algbw * 2.0 * (g_size - 1) / g_size;
  if (g_rank == 0) {
    if (f.csv) {
      std::printf("bw,%s,%d,%lld,%lld,float,sum,%lld,%.3f,%.4f,%.4f,,,,,%lld\n", g_impl.c_str(),
                  g_size, (long long)bytes, (long long)count, (long long)iters, per_op * 1e6, algbw,
                  busbw, (long long)wrong);
    } else {
      std::printf(" %12lld %12lld %8s %6s %8lld %11.2f %9.3f %9.3f %7lld\n", (long long)bytes,
                  (long long)count, "float", "sum", (long long)iters, per_op * 1e6, algbw, busbw,
                  (long long)wrong);
    }
    std::fflush(stdout);
  }
  return wrong;
}

// Latency of a 4-byte allreduce from enqueue to done. poll: spin on hora_poll instead of
// blocking in hora_wait (shows what the wake-up of the waiting thread costs).
void BenchLatency(const Flags& f, bool poll) {
  float v = 1.0f;
  const char* name = "bench.latency";
  for (int i = 0; i < 100; ++i) Allreduce(name, &v, 1, HORA_SUM, poll);
  std::vector<double> total(static_cast<size_t>(f.lat_iters)), enqueue(total.size());
  int64_t shape[1] = {1};
  Barrier();
  for (size_t i = 0; i < total.size(); ++i) {
    v = 1.0f;
    hora_tensor_t t = Tensor(&v, shape);
    hora_handle_t h = 0;
    double a = Now();
    Must(hora_allreduce_async(name, &t, &v, HORA_SUM, 1.0, 1.0, HORA_GLOBAL_PROCESS_SET, &h), name);
    double b = Now();
    if (poll) {
      int done = 0;
      while (!done) Must(hora_poll(h, &done), "hora_poll");
    }
    Must(hora_wait(h, -1), name);
    double c = Now();
    Must(hora_release(h), "hora_release");
    total[i] = (c - a) * 1e6;
    enqueue[i] = (b - a) * 1e6;
  }
  // Percentiles per rank; report the slowest rank's.
  double p50 = MaxOverRanks(Percentile(total, 0.5));
  double p90 = MaxOverRanks(Percentile(total, 0.9));
  double mn = MaxOverRanks(Percentile(total, 0.0));
  double mean = 0;
  for (double x : total) mean += x;
  mean = MaxOverRanks(mean / total.size());
  double enq = MaxOverRanks(Percentile(enqueue, 0.5));
  if (g_rank == 0) {
    const std::string impl_name = poll ? g_impl + "-poll" : g_impl;
    const char* impl = impl_name.c_str();
    if (f.csv) {
      std::printf("lat,%s,%d,4,1,float,sum,%lld,%.3f,,,%.3f,%.3f,%.3f,%.3f,0\n", impl, g_size,
                  (long long)f.lat_iters, mean, p50, p90, mn, enq);
    } else {
      std::printf(
          "# %s 4-byte allreduce latency, enqueue to done, %lld iterations: median %.1f us, "
          "p90 %.1f us, min %.1f us, mean %.1f us; the enqueue call itself: median %.2f us\n",
          impl, (long long)f.lat_iters, p50, p90, mn, mean, enq);
    }
    std::fflush(stdout);
  }
}

}  // namespace

// One run: hora_init (deterministic: 0 = the environment's, 1 on, -1 off), every size, the
// latency, hora_shutdown. Returns the wrong elements.
int64_t RunOnce(const Flags& f, int32_t deterministic, bool header) {
  hora_config_t config = HORA_CONFIG_INITIALIZER;
  config.deterministic = deterministic;
  double t0 = Now();
  // After a hora_shutdown a rank may reach the previous run's coordinator before rank 0 has
  // closed it; that one refuses it (the options differ between the runs): try again.
  hora_status_t s = hora_init(&config);
  for (int tries = 0; s == HORA_ERR_FAILED_PRECONDITION && tries < 100; ++tries) {
    usleep(100 * 1000);
    s = hora_init(&config);
  }
  Must(s, "hora_init");
  double init_s = Now() - t0;
  Must(hora_rank(&g_rank), "hora_rank");
  Must(hora_size(&g_size), "hora_size");
  if (g_rank == 0 && header) PrintHeader(f);
  if (g_rank == 0 && !f.csv) std::printf("# %s\n", g_impl.c_str());
  int64_t wrong = 0;
  if (f.bandwidth) {
    for (int64_t bytes = f.min_bytes; bytes <= f.max_bytes; bytes *= f.step_factor) {
      wrong += BenchSize(f, bytes);
    }
  }
  if (f.latency) {
    if (f.lat_mode != "poll") BenchLatency(f, false);
    if (f.lat_mode != "wait") BenchLatency(f, true);
  }
  if (g_rank == 0 && !f.csv) {
    std::printf("# %s: hora_init took %.3f s on rank 0; wrong elements: %lld\n", g_impl.c_str(),
                init_s, (long long)wrong);
  }
  Must(hora_shutdown(), "hora_shutdown");
  return wrong;
}

int main(int argc, char** argv) {
  Flags f = ParseFlags(argc, argv);
  const std::string impl = g_impl;
  int64_t wrong = 0;
  if (f.deterministic == "both") {
    for (int64_t round = 0; round < f.rounds; ++round) {
      g_impl = impl;
      wrong += RunOnce(f, -1, round == 0);
      g_impl = impl + "-deterministic";
      wrong += RunOnce(f, 1, false);
    }
  } else {
    const int32_t mode = f.deterministic == "on" ? 1 : f.deterministic == "off" ? -1 : 0;
    if (mode == 1) g_impl = impl + "-deterministic";
    for (int64_t round = 0; round < f.rounds; ++round) wrong += RunOnce(f, mode, round == 0);
  }
  if (wrong != 0) {
    std::fprintf(stderr, "rank %d: %lld wrong elements\n", g_rank, (long long)wrong);
    return 1;
  }
  return 0;
}
