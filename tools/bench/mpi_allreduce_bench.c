/* Open MPI MPI_Allreduce benchmark with the same sizes and columns as hora_allreduce_bench:
 * float32 sum, in place (MPI_IN_PLACE), real values, one check per size, iteration count
 * adapted to about --target-seconds per size, time per operation of the slowest rank, algbw
 * and busbw (2 (n - 1) / n) in GB/s; then the raw latency of a 4-byte allreduce (median, p90).
 *
 *   mpirun --allow-run-as-root --oversubscribe --bind-to none -np 2 \
 *       bazel-bin/tools/bench/mpi_allreduce_bench [--csv] [--impl NAME]
 *
 * Flags: --min-bytes N (4) --max-bytes N (256M) --step-factor F (4) --target-seconds S (0.6)
 * --max-iters N (100000) --min-iters N (3) --lat-iters N (2000) --no-latency --no-bandwidth
 * --csv --impl NAME (the label in the impl column, e.g. mpi-vader, mpi-tcp). */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_rank = 0, g_size = 1;

typedef struct {
  long long min_bytes, max_bytes, step_factor, max_iters, min_iters, lat_iters;
  double target_seconds;
  int latency, bandwidth, csv;
  const char* impl;
} Flags;

static long long ParseBytes(const char* flag, const char* v) {
  char* end = NULL;
  double x = strtod(v, &end);
  long long mult = 1;
  if (end && *end) {
    if (*end == 'k' || *end == 'K')
      mult = 1ll << 10;
    else if (*end == 'm' || *end == 'M')
      mult = 1ll << 20;
    else if (*end == 'g' || *end == 'G')
      mult = 1ll << 30;
    else {
      fprintf(stderr, "%s: bad size '%s'\n", flag, v);
      exit(2);
    }
  }
  return (long long)(x * mult);
}

static Flags ParseFlags(int argc, char** argv) {
  Flags f = {4, 256ll << 20, 4, 100000, 3, 2000, 0.6, 1, 1, 0, "mpi"};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV()                                 \
  do {                                          \
    if (!v) {                                   \
      fprintf(stderr, "%s needs a value\n", a); \
      exit(2);                                  \
    }                                           \
    ++i;                                        \
  } while (0)
    if (!strcmp(a, "--csv"))
      f.csv = 1;
    else if (!strcmp(a, "--no-latency"))
      f.latency = 0;
    else if (!strcmp(a, "--no-bandwidth"))
      f.bandwidth = 0;
    else if (!strcmp(a, "--min-bytes")) {
      NEEDV();
      f.min_bytes = ParseBytes(a, v);
    } else if (!strcmp(a, "--max-bytes")) {
      NEEDV();
      f.max_bytes = ParseBytes(a, v);
    } else if (!strcmp(a, "--step-factor")) {
      NEEDV();
      f.step_factor = atoll(v);
    } else if (!strcmp(a, "--target-seconds")) {
      NEEDV();
      f.target_seconds = atof(v);
    } else if (!strcmp(a, "--max-iters")) {
      NEEDV();
      f.max_iters = atoll(v);
    } else if (!strcmp(a, "--min-iters")) {
      NEEDV();
      f.min_iters = atoll(v);
    } else if (!strcmp(a, "--lat-iters")) {
      NEEDV();
      f.lat_iters = atoll(v);
    } else if (!strcmp(a, "--impl")) {
      NEEDV();
      f.impl = v;
    } else {
      fprintf(stderr, "unknown flag %s\n", a);
      exit(2);
    }
#undef NEEDV
  }
  if (f.min_bytes < 4) f.min_bytes = 4;
  if (f.step_factor < 2) f.step_factor = 2;
  if (f.min_iters < 1) f.min_iters = 1;
  if (f.lat_iters < 1) f.lat_iters = 1;
  return f;
}

static double MaxOverRanks(double x) {
  double v = x;
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return v;
}

/* Rank r holds (i % 13) + r + 1 at element i; the sum over n ranks is exact in float32. */
static void Fill(float* buf, long long n) {
  for (long long i = 0; i < n; ++i) buf[i] = (float)(i % 13 + g_rank + 1);
}

static long long CountWrong(const float* buf, long long n) {
  long long wrong = 0;
  double base = g_size * (g_size + 1) / 2.0;
  for (long long i = 0; i < n; ++i) {
    double want = g_size * (double)(i % 13) + base;
    if (buf[i] != (float)want) {
      if (wrong < 3)
        fprintf(stderr, "rank %d: element %lld is %g, want %g\n", g_rank, i, buf[i], want);
      ++wrong;
    }
  }
  return wrong;
}

static int CmpDouble(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* v must be sorted. */
static double Percentile(const double* v, long long n, double p) {
  long long k = (long long)ceil(p * n) - 1;
  if (k < 0) k = 0;
  if (k > n - 1) k = n - 1;
  return v[k];
}

static void Allreduce(float* buf, long long count) {
  MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

static long long BenchSize(const Flags* f, long long bytes) {
  long long count = bytes / 4;
  float* buf = (float*)malloc((size_t)count * sizeof(float));
  if (!buf) {
    fprintf(stderr, "out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  Fill(buf, count);
  double t0 = MPI_Wtime();
  Allreduce(buf, count);
  double first = MaxOverRanks(MPI_Wtime() - t0); /* every rank must pick the same batches */
  long long wrong = (long long)MaxOverRanks((double)CountWrong(buf, count));

  /* Warm-up in batches that every rank runs alike, growing until a batch takes about a
   * quarter of the target time (0.15 s at most); the last batch estimates one operation. */
  double window = f->target_seconds / 4 < 0.15 ? f->target_seconds / 4 : 0.15;
  long long batch = first > 0.05 ? 1 : 5;
  double est = first;
  for (;;) {
    t0 = MPI_Wtime();
    for (long long i = 0; i < batch; ++i) Allreduce(buf, count);
    double elapsed = MaxOverRanks(MPI_Wtime() - t0);
    est = elapsed / batch;
    if (elapsed >= window || batch >= f->max_iters) break;
    double grow = ceil(batch * 1.2 * window / (elapsed > 1e-9 ? elapsed : 1e-9));
    long long next = grow > 16.0 * batch ? 16 * batch : (long long)grow;
    batch = next > 2 * batch ? next : 2 * batch;
  }
  long long iters = (long long)ceil(f->target_seconds / (est > 1e-7 ? est : 1e-7));
  if (iters > f->max_iters) iters = f->max_iters;
  if (iters < f->min_iters) iters = f->min_iters;

  MPI_Barrier(MPI_COMM_WORLD);
  t0 = MPI_Wtime();
  for (long long i = 0; i < iters; ++i) Allreduce(buf, count);
  double per_op = MaxOverRanks((MPI_Wtime() - t0) / iters);
  free(buf);

  double algbw = bytes / per_op / 1e9;
  double busbw = algbw * 2.0 * (g_size - 1) / g_size;
  if (g_rank == 0) {
    if (f->csv) {
      printf("bw,%s,%d,%lld,%lld,float,sum,%lld,%.3f,%.4f,%.4f,,,,,%lld\n", f->impl, g_size, bytes,
             count, iters, per_op * 1e6, algbw, busbw, wrong);
    } else {
      printf(" %12lld %12lld %8s %6s %8lld %11.2f %9.3f %9.3f %7lld\n", bytes, count, "float",
             "sum", iters, per_op * 1e6, algbw, busbw, wrong);
    }
    fflush(stdout);
  }
  return wrong;
}

static void BenchLatency(const Flags* f) {
  float v = 1.0f;
  long long n = f->lat_iters;
  double* t = (double*)malloc((size_t)n * sizeof(double));
  for (int i = 0; i < 100; ++i) Allreduce(&v, 1);
  MPI_Barrier(MPI_COMM_WORLD);
  double sum = 0;
  for (long long i = 0; i < n; ++i) {
    v = 1.0f;
    double a = MPI_Wtime();
    Allreduce(&v, 1);
    t[i] = (MPI_Wtime() - a) * 1e6;
    sum += t[i];
  }
  qsort(t, (size_t)n, sizeof(double), CmpDouble);
  double p50 = MaxOverRanks(Percentile(t, n, 0.5));
  double p90 = MaxOverRanks(Percentile(t, n, 0.9));
  double mn = MaxOverRanks(t[0]);
  double mean = MaxOverRanks(sum / n);
  free(t);
  if (g_rank == 0) {
    if (f->csv) {
      printf("lat,%s,%d,4,1,float,sum,%lld,%.3f,,,%.3f,%.3f,%.3f,,0\n", f->impl, g_size, n, mean,
             p50, p90, mn);
    } else {
      printf(
          "# %s 4-byte MPI_Allreduce latency, %lld iterations: median %.2f us, p90 %.2f us, "
          "min %.2f us, mean %.2f us\n",
          f->impl, n, p50, p90, mn, mean);
    }
    fflush(stdout);
  }
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  Flags f = ParseFlags(argc, argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (g_rank == 0) {
    if (f.csv) {
      printf(
          "kind,impl,np,bytes,count,type,op,iters,time_us,algbw_gbs,busbw_gbs,p50_us,p90_us,"
          "min_us,extra_us,wrong\n");
    } else {
      printf("# %s MPI_Allreduce benchmark, %d ranks, float32 sum, in place\n", f.impl, g_size);
      printf("#%12s %12s %8s %6s %8s %11s %9s %9s %7s\n", "size", "count", "type", "redop", "iters",
             "time", "algbw", "busbw", "#wrong");
      printf("#%12s %12s %8s %6s %8s %11s %9s %9s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
             "(GB/s)", "(GB/s)", "");
    }
    fflush(stdout);
  }
  long long wrong = 0;
  if (f.bandwidth) {
    for (long long bytes = f.min_bytes; bytes <= f.max_bytes; bytes *= f.step_factor) {
      wrong += BenchSize(&f, bytes);
    }
  }
  if (f.latency) BenchLatency(&f);
  MPI_Finalize();
  if (wrong != 0) {
    fprintf(stderr, "rank %d: %lld wrong elements\n", g_rank, wrong);
    return 1;
  }
  return 0;
}
