// Throughput of the CUDA batched scaled copy (collectives/cuda/batch_copy.h) next to
// cudaMemcpyAsync of the same bytes, device to device.
//
//   bazel run //tools/bench:cuda_batch_copy_bench [-- --device=0]
//
// For spans in {1, 16, 256}, total sizes {1, 16, 256} MiB, dtypes {float32, bfloat16} and
// scales {1, 0.5}, it packs the spans (equal parts of one source buffer) into a contiguous
// destination with BatchCopier::Copy, and times the same bytes moved by one cudaMemcpyAsync per
// span and by one cudaMemcpyAsync for the whole. GB/s are bytes copied (each byte read once and
// written once) per second, 1 GB = 1e9 bytes, from CUDA events around a loop of Copies.
//
// Output: a header, one row per case
//   dtype spans total_MiB scale kernel_GBps memcpy_span_GBps memcpy_whole_GBps vs_span vs_whole
// (vs_* = kernel / memcpy), then ONE last line, for scripts to grep:
//   SUMMARY cuda_batch_copy cases=36 min_vs_whole=R min_vs_span=R geomean_vs_whole=R
//       min_vs_whole_large=R target=0.80 result=PASS|BELOW
// (one line; "large" = total >= 16 MiB; result is PASS when min_vs_whole_large >= target).
// Exit status 0 when it measured (whatever the result), 1 when CUDA failed.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collectives/cuda/batch_copy.h"
#include "collectives/cuda/cuda_error.h"

namespace hora {
namespace cuda {
namespace {

#define BENCH_CHECK(call)                                                         \
  do {                                                                            \
    Status _s = CudaStatus((call), #call);                                        \
    if (!_s.ok()) {                                                               \
      std::fprintf(stderr, "cuda_batch_copy_bench: %s\n", _s.ToString().c_str()); \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

struct Result {
  double kernel, span, whole;  // GB/s
};

// Until `e` completed; exits after 120 s (a hung copy must not hang the bench).
void WaitBounded(cudaEvent_t e) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  cudaError_t r;
  while ((r = cudaEventQuery(e)) == cudaErrorNotReady) {
    if (std::chrono::steady_clock::now() > end) {
      std::fprintf(stderr, "cuda_batch_copy_bench: the timed loop did not finish in 120 s\n");
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  BENCH_CHECK(r);
}

template <typename F>
double TimeGBps(F&& enqueue, cudaStream_t stream, size_t bytes, int iters) {
  for (int i = 0; i < 3; ++i) enqueue();  // warm-up
  cudaEvent_t a, b;
  BENCH_CHECK(cudaEventCreate(&a));
  BENCH_CHECK(cudaEventCreate(&b));
  BENCH_CHECK(cudaEventRecord(a, stream));
  for (int i = 0; i < iters; ++i) enqueue();
  BENCH_CHECK(cudaEventRecord(b, stream));
  WaitBounded(b);
  float ms = 0;
  BENCH_CHECK(cudaEventElapsedTime(&ms, a, b));
  BENCH_CHECK(cudaEventDestroy(a));
  BENCH_CHECK(cudaEventDestroy(b));
  return static_cast<double>(bytes) * iters / (ms * 1e-3) / 1e9;
}

Result RunCase(BatchCopier& copier, cudaStream_t stream, unsigned char* src, unsigned char* dst,
               DataType dtype, size_t nspans, size_t total, double scale) {
  const size_t es = DataTypeSize(dtype);
  const size_t elems = total / es;
  std::vector<CopySpan> spans;
  std::vector<std::pair<size_t, size_t>> parts;  // byte offset, bytes
  for (size_t i = 0; i < nspans; ++i) {
    size_t b = elems * i / nspans, e = elems * (i + 1) / nspans;
    spans.push_back(CopySpan{src + b * es, dst + b * es, e - b});
    parts.emplace_back(b * es, (e - b) * es);
  }
  const size_t bytes = elems * es;
  const int iters = static_cast<int>(std::clamp<size_t>((size_t{4} << 30) / bytes, 5, 500));
  Result r;
  r.kernel = TimeGBps(
      [&] {
        Status s = copier.Copy(spans, dtype, scale, stream);
        if (!s.ok()) {
          std::fprintf(stderr, "cuda_batch_copy_bench: %s\n", s.ToString().c_str());
          std::exit(1);
        }
      },
      stream, bytes, iters);
  r.span = TimeGBps(
      [&] {
        for (auto [off, n] : parts) {
          BENCH_CHECK(cudaMemcpyAsync(dst + off, src + off, n, cudaMemcpyDeviceToDevice, stream));
        }
      },
      stream, bytes, iters);
  r.whole = TimeGBps(
      [&] { BENCH_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream)); },
      stream, bytes, iters);
  return r;
}

int Main(int argc, char** argv) {
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--device=", 9) == 0) {
      device = std::atoi(argv[i] + 9);
    } else {
      std::fprintf(stderr, "usage: %s [--device=N]\n", argv[0]);
      return 2;
    }
  }
  auto copier = BatchCopier::Create(device);
  if (!copier.ok()) {
    std::fprintf(stderr, "cuda_batch_copy_bench: %s\n", copier.status().ToString().c_str());
    return 1;
  }
  BENCH_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, device));
  std::printf("device %d: %s (sm_%d%d), kernels built for %s\n", device, prop.name, prop.major,
              prop.minor, BuiltArchitectures());
  const size_t kMax = size_t{256} << 20;
  void *src = nullptr, *dst = nullptr;
  BENCH_CHECK(cudaMalloc(&src, kMax));
  BENCH_CHECK(cudaMalloc(&dst, kMax));
  BENCH_CHECK(cudaMemset(src, 0x3c, kMax));  // finite values in float32 and bfloat16
  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  BENCH_CHECK(cudaDeviceSynchronize());

  std::printf("%-9s %6s %9s %5s %11s %16s %17s %7s %8s\n", "dtype", "spans", "total_MiB", "scale",
              "kernel_GBps", "memcpy_span_GBps", "memcpy_whole_GBps", "vs_span", "vs_whole");
  int cases = 0;
  double min_whole = 1e30, min_span = 1e30, min_whole_large = 1e30, log_sum = 0;
  for (DataType dtype : {DataType::kFloat32, DataType::kBfloat16}) {
    for (double scale : {1.0, 0.5}) {
      for (size_t mib : {size_t{1}, size_t{16}, size_t{256}}) {
        for (size_t nspans : {size_t{1}, size_t{16}, size_t{256}}) {
          Result r = RunCase(*copier.value(), stream, static_cast<unsigned char*>(src),
                             static_cast<unsigned char*>(dst), dtype, nspans, mib << 20, scale);
          double vs_span = r.kernel / r.span, vs_whole = r.kernel / r.whole;
          std::printf("%-9s %6zu %9zu %5.2f %11.1f %16.1f %17.1f %7.3f %8.3f\n",
                      DataTypeName(dtype), nspans, mib, scale, r.kernel, r.span, r.whole, vs_span,
                      vs_whole);
          ++cases;
          min_whole = std::min(min_whole, vs_whole);
          min_span = std::min(min_span, vs_span);
          if (mib >= 16) min_whole_large = std::min(min_whole_large, vs_whole);
          log_sum += std::log(vs_whole);
        }
      }
    }
  }
  const double kTarget = 0.80;
  std::printf(
      "SUMMARY cuda_batch_copy cases=%d min_vs_whole=%.3f min_vs_span=%.3f "
      "geomean_vs_whole=%.3f min_vs_whole_large=%.3f target=%.2f result=%s\n",
      cases, min_whole, min_span, std::exp(log_sum / cases), min_whole_large, kTarget,
      min_whole_large >= kTarget ? "PASS" : "BELOW");
  BENCH_CHECK(cudaStreamDestroy(stream));
  BENCH_CHECK(cudaFree(src));
  BENCH_CHECK(cudaFree(dst));
  return 0;
}

}  // namespace
}  // namespace cuda
}  // namespace hora

int main(int argc, char** argv) { return hora::cuda::Main(argc, argv); }
