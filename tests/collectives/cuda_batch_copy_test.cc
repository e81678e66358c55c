// BatchCopier on a GPU (tagged gpu): every dtype and scale against common/reduce.h's
// ScaleCopy on the CPU, bit for bit, with odd counts, unaligned offsets, many spans, guard
// bytes around every destination, and staging slots reused by Copies in flight.
//
// Each check builds a device source buffer of random bytes and a destination buffer filled
// with a guard pattern, copies the spans, and compares the WHOLE destination buffer with a
// host replica on which ScaleCopy ran over the same spans: a value off by one bit, a byte
// written outside a span, or a span not written all fail.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "collectives/cuda/batch_copy.h"
#include "common/reduce.h"
#include "tests/collectives/cuda_test_util.h"
#include "tests/harness/hang_bound.h"

namespace hora {
namespace cuda {
namespace {

using testing::DeviceBuffer;
using testing::Stream;

constexpr DataType kTypes[] = {DataType::kUint8,   DataType::kInt8,     DataType::kInt16,
                               DataType::kUint16,  DataType::kInt32,    DataType::kInt64,
                               DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                               DataType::kFloat64, DataType::kBool};
const double kScales[] = {1.0, 0.5, 1.0 / 3.0, 3.0};
const size_t kOffsets[] = {0, 2, 4, 6, 8, 14};
constexpr size_t kGuard = 64;  // bytes of guard pattern before and after every dst region
constexpr unsigned char kPattern = 0xA5;

// A stream wait that never ends fails the test (HangBound: never a time assertion).
const std::chrono::milliseconds kSyncDeadline = testing::HangBound(std::chrono::seconds(10));

struct SpanDesc {
  size_t count;
  size_t src_off;  // byte offset from a 256-aligned address
  size_t dst_off;
};

// One Copy: its buffers, the spans and the host replica of the expected destination.
class Batch {
 public:
  Batch(DataType dtype, double scale, const std::vector<SpanDesc>& descs, uint64_t seed)
      : dtype_(dtype), scale_(scale) {
    const size_t es = DataTypeSize(dtype);
    size_t src_bytes = 0, dst_bytes = 0;
    std::vector<std::pair<size_t, size_t>> at;  // (src, dst) byte positions
    for (const SpanDesc& d : descs) {
      size_t s = src_bytes + d.src_off;
      size_t t = dst_bytes + kGuard + d.dst_off;
      at.emplace_back(s, t);
      src_bytes = Round256(s + d.count * es);
      dst_bytes = Round256(t + d.count * es + kGuard);
    }
    src_host_.resize(src_bytes + 1);
    std::mt19937_64 rng(seed);
    for (auto& b : src_host_) b = static_cast<unsigned char>(rng());
    want_.assign(dst_bytes + 1, kPattern);
    src_ = std::make_unique<DeviceBuffer>(src_host_.size());
    dst_ = std::make_unique<DeviceBuffer>(want_.size());
    for (size_t i = 0; i < descs.size(); ++i) {
      ScaleCopy(&want_[at[i].second], &src_host_[at[i].first], descs[i].count, dtype, scale);
      spans_.push_back(CopySpan{nullptr, nullptr, descs[i].count});
    }
    at_ = at;
  }

  Status Setup() {
    HORA_RETURN_IF_ERROR(src_->status());
    HORA_RETURN_IF_ERROR(dst_->status());
    HORA_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(src_->get(), src_host_.data(), src_host_.size(), cudaMemcpyHostToDevice));
    HORA_CUDA_RETURN_IF_ERROR(cudaMemset(dst_->get(), kPattern, want_.size()));
    // The legacy stream's copy and memset, done before the test's non-blocking stream runs.
    HORA_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    for (size_t i = 0; i < spans_.size(); ++i) {
      spans_[i].src = src_->get() + at_[i].first;
      spans_[i].dst = dst_->get() + at_[i].second;
    }
    return Status::Ok();
  }

  Status Enqueue(BatchCopier& copier, cudaStream_t stream) {
    return copier.Copy(spans_, dtype_, scale_, stream);
  }

  // After the stream is synchronized: the number of bytes that differ (0 = pass).
  size_t Mismatches(std::string* first) {
    std::vector<unsigned char> got(want_.size());
    Status s = CudaStatus(cudaMemcpy(got.data(), dst_->get(), got.size(), cudaMemcpyDeviceToHost),
                          "cudaMemcpy");
    if (!s.ok()) {
      *first = s.ToString();
      return got.size();
    }
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want_[i] && bad++ == 0) {
        *first = std::string(DataTypeName(dtype_)) + " scale " + std::to_string(scale_) +
                 ": first wrong byte at " + std::to_string(i) + " of the dst buffer";
      }
    }
    return bad;
  }

 private:
  static size_t Round256(size_t x) { return (x + 255) / 256 * 256; }

  DataType dtype_;
  double scale_;
  std::vector<unsigned char> src_host_, want_;
  std::unique_ptr<DeviceBuffer> src_, dst_;
  std::vector<std::pair<size_t, size_t>> at_;
  std::vector<CopySpan> spans_;
};

std::unique_ptr<BatchCopier> MakeCopier() {
  auto c = BatchCopier::Create(0);
  INFO(c.status().ToString());
  REQUIRE(c.ok());
  return std::move(c).value();
}

void RunOne(BatchCopier& copier, cudaStream_t stream, DataType dtype, double scale,
            const std::vector<SpanDesc>& descs, uint64_t seed) {
  Batch b(dtype, scale, descs, seed);
  Status s = b.Setup();
  INFO(s.ToString());
  REQUIRE(s.ok());
  s = b.Enqueue(copier, stream);
  INFO(s.ToString());
  REQUIRE(s.ok());
  s = testing::SyncBounded(stream, kSyncDeadline);
  INFO(s.ToString());
  REQUIRE(s.ok());
  std::string first;
  size_t bad = b.Mismatches(&first);
  INFO(first);
  REQUIRE(bad == 0);
}

TEST_CASE("batch copy: every dtype and scale, odd counts and unaligned offsets, bit for bit") {
  auto copier = MakeCopier();
  Stream stream;
  REQUIRE(stream.status().ok());
  std::vector<SpanDesc> descs;
  for (size_t count : {size_t{0}, size_t{1}, size_t{3}, size_t{7}, size_t{1023}}) {
    for (size_t so : kOffsets) {
      for (size_t d : kOffsets) descs.push_back(SpanDesc{count, so, d});
    }
  }
  // The large count with equal, compatible and incompatible alignments.
  const size_t big = (size_t{1} << 20) + 5;
  for (auto [so, d] : {std::pair<size_t, size_t>{0, 0}, {8, 8}, {2, 14}, {6, 4}, {14, 2}}) {
    descs.push_back(SpanDesc{big, so, d});
  }
  uint64_t seed = 1;
  for (DataType t : kTypes) {
    for (double scale : kScales) {
      INFO(DataTypeName(t) << " scale " << scale);
      RunOne(*copier, stream.get(), t, scale, descs, seed++);
    }
  }
}

TEST_CASE("batch copy: 1, 17 and 5000 spans in one Copy") {
  auto copier = MakeCopier();
  Stream stream;
  REQUIRE(stream.status().ok());
  std::mt19937_64 rng(99);
  uint64_t seed = 100;
  for (size_t n : {size_t{1}, size_t{17}, size_t{5000}}) {  // 5000 > one staging slot's spans
    std::vector<SpanDesc> descs;
    for (size_t i = 0; i < n; ++i) {
      descs.push_back(
          SpanDesc{static_cast<size_t>(rng() % 3000), kOffsets[rng() % 6], kOffsets[rng() % 6]});
    }
    for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kFloat16,
                       DataType::kFloat64, DataType::kInt32}) {
      for (double scale : kScales) {
        INFO(n << " spans, " << DataTypeName(t) << " scale " << scale);
        RunOne(*copier, stream.get(), t, scale, descs, seed++);
      }
    }
  }
}

TEST_CASE("batch copy: staging slots reused by many Copies in flight") {
  auto copier = MakeCopier();
  Stream stream;
  REQUIRE(stream.status().ok());
  std::mt19937_64 rng(7);
  std::vector<std::unique_ptr<Batch>> batches;
  // Far more Copies than the copier has slots; about 60 % of them with more spans than a
  // launch carries inline (kInlineSpans), so both kinds of launch interleave on the stream.
  for (int k = 0; k < 64; ++k) {
    std::vector<SpanDesc> descs;
    size_t n = 1 + rng() % 80;
    for (size_t i = 0; i < n; ++i) {
      descs.push_back(
          SpanDesc{static_cast<size_t>(rng() % 70000), kOffsets[rng() % 6], kOffsets[rng() % 6]});
    }
    DataType t = kTypes[k % 9];
    batches.push_back(std::make_unique<Batch>(t, kScales[k % 4], descs, 1000 + k));
    Status s = batches.back()->Setup();
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  for (auto& b : batches) {
    Status s = b->Enqueue(*copier, stream.get());
    INFO(s.ToString());
    REQUIRE(s.ok());
  }
  Status s = testing::SyncBounded(stream.get(), kSyncDeadline);
  INFO(s.ToString());
  REQUIRE(s.ok());
  for (auto& b : batches) {
    std::string first;
    size_t bad = b->Mismatches(&first);
    INFO(first);
    CHECK(bad == 0);
  }
}

TEST_CASE("batch copy: in place (src == dst) scales like ScaleInPlace") {
  auto copier = MakeCopier();
  Stream stream;
  REQUIRE(stream.status().ok());
  const size_t n = 100003;
  for (DataType t : {DataType::kFloat32, DataType::kBfloat16, DataType::kInt64}) {
    const size_t bytes = n * DataTypeSize(t);
    std::vector<unsigned char> host(bytes + 6);
    std::mt19937_64 rng(5);
    for (auto& b : host) b = static_cast<unsigned char>(rng());
    std::vector<unsigned char> want = host;
    ScaleInPlace(&want[6], n, t, 0.5);
    DeviceBuffer buf(host.size());
    REQUIRE(buf.status().ok());
    REQUIRE(cudaMemcpy(buf.get(), host.data(), host.size(), cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    Status s = copier->Copy({CopySpan{buf.get() + 6, buf.get() + 6, n}}, t, 0.5, stream.get());
    REQUIRE(s.ok());
    REQUIRE(testing::SyncBounded(stream.get(), kSyncDeadline).ok());
    std::vector<unsigned char> got(host.size());
    REQUIRE(cudaMemcpy(got.data(), buf.get(), got.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
    INFO(DataTypeName(t));
    CHECK(got == want);
  }
}

TEST_CASE("batch copy: bad input is refused with a message naming it, nothing written") {
  auto copier = MakeCopier();
  Stream stream;
  REQUIRE(stream.status().ok());
  DeviceBuffer src(64), dst(64);
  REQUIRE(src.status().ok());
  REQUIRE(dst.status().ok());
  REQUIRE(cudaMemset(dst.get(), kPattern, 64) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  std::vector<CopySpan> spans = {CopySpan{src.get(), dst.get(), 16}};
  for (double scale : {1.0, 0.5}) {
    Status s = copier->Copy(spans, static_cast<DataType>(42), scale, stream.get());
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK(s.message().find("invalid dtype 42") != std::string::npos);
  }
  std::vector<CopySpan> null_span = {CopySpan{src.get(), dst.get(), 4},
                                     CopySpan{nullptr, dst.get(), 4}};
  Status s = copier->Copy(null_span, DataType::kFloat32, 0.5, stream.get());
  CHECK(s.code() == Code::kInvalidArgument);
  CHECK(s.message().find("span 1") != std::string::npos);
  REQUIRE(testing::SyncBounded(stream.get(), kSyncDeadline).ok());
  std::vector<unsigned char> got(64);
  REQUIRE(cudaMemcpy(got.data(), dst.get(), 64, cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(got == std::vector<unsigned char>(64, kPattern));  // the valid span 0 was not copied

  auto bad_device = BatchCopier::Create(-1);
  CHECK(bad_device.status().code() == Code::kInvalidArgument);
  int n = 0;
  REQUIRE(cudaGetDeviceCount(&n) == cudaSuccess);
  bad_device = BatchCopier::Create(n);
  CHECK(bad_device.status().code() == Code::kInvalidArgument);
  CHECK(bad_device.status().message().find("out of range") != std::string::npos);
  CHECK(std::string(BuiltArchitectures()) == "sm_80 sm_90 compute_90");
}

}  // namespace
}  // namespace cuda
}  // namespace hora
