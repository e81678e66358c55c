// BucketExecutor's device path (runtime/bucket_executor_device.cc) without a GPU: the "device"
// is host memory behind collectives/device.h's interfaces, and the communicator is a test
// double of a two-rank set whose other member contributes the same data (so a sum doubles).
// What is checked is the runtime's part: the order of the enqueued steps (every request's
// ready event waited for before its input is read), fusion offsets, prescale/postscale and
// Average's 1/size, zeros for a joined rank, and results held as device memory. The NCCL
// backend itself is tested on a GPU (tests/collectives/nccl_gpu_test.cc).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/device.h"
#include "common/reduce.h"
#include "runtime/bucket_executor.h"
#include "runtime/device_fusion_pool.h"

namespace hora {
namespace {

class HostEvent : public DeviceEvent {
 public:
  explicit HostEvent(std::string name) : name(std::move(name)) {}
  std::string name;
};

// Device memory = host memory; results are counted so that the test sees them freed.
class HostRuntime : public DeviceRuntime {
 public:
  Status Probe(int) const override { return Status::Ok(); }
  std::string Describe() const override { return "host memory standing in for a device"; }
  StatusOr<std::shared_ptr<DeviceEvent>> RecordEvent(int, void*) const override {
    return std::shared_ptr<DeviceEvent>(std::make_shared<HostEvent>("framework"));
  }
  Status Copy(int, void* dst, const void* src, size_t bytes, void*) const override {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  StatusOr<void*> Allocate(int, size_t bytes) const override {
    ++live;
    return std::malloc(bytes == 0 ? 1 : bytes);
  }
  void Free(int, void* p) const override {
    --live;
    std::free(p);
  }
  mutable int live = 0;
};

HostRuntime* Runtime() {
  static HostRuntime* r = [] {
    auto* rt = new HostRuntime();
    RegisterDeviceRuntime(Device::kCuda, rt);
    return rt;
  }();
  return r;
}

// The "stream": every step is logged and run at once, in order.
class HostOps : public DeviceOps {
 public:
  StatusOr<void*> Allocate(size_t bytes) override { return std::malloc(bytes == 0 ? 1 : bytes); }
  void Free(void* p) override { std::free(p); }
  Status WaitEvent(const DeviceEvent& e) override {
    log.push_back("wait " + dynamic_cast<const HostEvent&>(e).name);
    return Status::Ok();
  }
  Status ScaleCopy(const std::vector<DeviceCopySpan>& spans, DataType dtype,
                   double scale) override {
    log.push_back("copy x" + std::to_string(spans.size()));
    for (const auto& s : spans) hora::ScaleCopy(s.dst, s.src, s.count, dtype, scale);
    return Status::Ok();
  }
  Status Zero(void* dst, size_t bytes) override {
    log.push_back("zero");
    std::memset(dst, 0, bytes);
    return Status::Ok();
  }
  std::vector<std::string> log;
};

// Rank 0 of 2; the other rank's contribution equals this rank's (float32 only).
class TwinComm : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  const char* name() const override { return "twin"; }
  DeviceOps* device_ops() override { return &ops; }
  Status Allreduce(void* buf, size_t count, DataType dtype, ReduceOp op) override {
    ops.log.push_back("allreduce " + std::to_string(count));
    REQUIRE(dtype == DataType::kFloat32);
    REQUIRE(op == ReduceOp::kSum);
    for (size_t i = 0; i < count; ++i) static_cast<float*>(buf)[i] *= 2;
    return Status::Ok();
  }
  Status Broadcast(void*, size_t, int) override { return Status::Ok(); }
  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& bytes) override {
    ops.log.push_back("allgather");
    std::memcpy(out, in, bytes[0]);
    std::memcpy(static_cast<char*>(out) + bytes[0], in, bytes[1]);
    return Status::Ok();
  }
  Status Alltoallv(const void*, const std::vector<size_t>&, void*,
                   const std::vector<size_t>&) override {
    return Internal("not used");
  }
  Status Reducescatter(const void*, void*, const std::vector<size_t>&, DataType,
                       ReduceOp) override {
    return Internal("not used");
  }
  Status Barrier() override { return Status::Ok(); }
  Status Send(const void*, size_t, int, uint32_t) override { return Internal("not used"); }
  Status Recv(void*, size_t, int, uint32_t) override { return Internal("not used"); }
  void Abort(const Status&) override {}
  HostOps ops;
};

Request MakeRequest(const std::string& name, std::vector<float>* in, std::vector<float>* out) {
  Request r;
  r.spec.name = name;
  r.spec.dtype = DataType::kFloat32;
  r.spec.device = Device::kCuda;
  r.spec.shape = {static_cast<int64_t>(in->size())};
  r.input = in->data();
  r.output = out->data();
  r.ready = std::make_shared<HostEvent>(name);
  return r;
}

TEST_CASE("device bucket: fused allreduce waits for every input, packs, scales, unpacks") {
  Runtime();
  TwinComm comm;
  BucketExecutor exec(&comm);
  std::vector<float> a = {1, 2, 3}, b = {4}, c = {5, 6};
  std::vector<float> oa(3, -1), ob(1, -1), oc(2, -1);
  Request ra = MakeRequest("a", &a, &oa), rc = MakeRequest("c", &c, &oc);
  BucketPlan plan;
  plan.collective = CollectiveType::kAllreduce;
  plan.device = Device::kCuda;
  plan.op = ReduceOp::kAverage;
  plan.prescale = 2.0;
  plan.postscale = 3.0;
  plan.entries.resize(3);
  plan.entries[0].num_elements = 3;
  plan.entries[1].num_elements = 1;  // this rank joined: contributes zeros
  plan.entries[2].num_elements = 2;
  std::vector<OpResult> results;
  BucketExecutor::Finish finish;
  REQUIRE(exec.Start(plan, {&ra, nullptr, &rc}, &results, &finish).ok());
  // Average over 2 ranks of twins: x * prescale * 2 / 2 * postscale = 6x.
  CHECK(oa == std::vector<float>({6, 12, 18}));
  CHECK(oc == std::vector<float>({30, 36}));
  CHECK(ob == std::vector<float>({-1}));  // a joined entry has no output here
  CHECK(comm.ops.log == std::vector<std::string>(
                            {"wait a", "wait c", "zero", "copy x2", "allreduce 6", "copy x2"}));
  REQUIRE(finish);  // holds the device fusion buffer until the Work is done
  CHECK(finish().ok());
}

TEST_CASE("device bucket: one tensor runs on its output, scaled on the stream") {
  Runtime();
  TwinComm comm;
  BucketExecutor exec(&comm);
  std::vector<float> a = {1, -2, 3.5f}, out(3, 0);
  Request r = MakeRequest("one", &a, &out);
  BucketPlan plan;
  plan.collective = CollectiveType::kAllreduce;
  plan.device = Device::kCuda;
  plan.op = ReduceOp::kSum;
  plan.postscale = 0.5;
  plan.entries.resize(1);
  plan.entries[0].num_elements = 3;
  std::vector<OpResult> results;
  BucketExecutor::Finish finish;
  REQUIRE(exec.Start(plan, {&r}, &results, &finish).ok());
  CHECK(out == std::vector<float>({1, -2, 3.5f}));  // (x + x) * 0.5
  CHECK(a == std::vector<float>({1, -2, 3.5f}));    // the input is not written
  CHECK(comm.ops.log ==
        std::vector<std::string>({"wait one", "copy x1", "allreduce 3", "copy x1"}));
  CHECK(!finish);
}

TEST_CASE("device bucket: allgather's result is device memory the result holds") {
  HostRuntime* rt = Runtime();
  const int live = rt->live;
  TwinComm comm;
  BucketExecutor exec(&comm);
  std::vector<float> a = {7, 8, 9, 10}, unused(4);
  Request r = MakeRequest("g", &a, &unused);
  r.spec.collective = CollectiveType::kAllgather;
  r.spec.shape = {2, 2};
  BucketPlan plan;
  plan.collective = CollectiveType::kAllgather;
  plan.device = Device::kCuda;
  plan.entries.resize(1);
  plan.entries[0].num_elements = 4;
  plan.entries[0].first_dims = {2, 2};
  {
    std::vector<OpResult> results;
    BucketExecutor::Finish finish;
    REQUIRE(exec.Start(plan, {&r}, &results, &finish).ok());
    REQUIRE(results.size() == 1);
    const OpResult& res = results[0];
    CHECK(res.data.empty());
    CHECK(res.shape == std::vector<int64_t>({4, 2}));
    REQUIRE(res.device_data);
    REQUIRE(res.device_bytes == 8 * sizeof(float));
    std::vector<float> got(8);
    std::memcpy(got.data(), res.device_data.get(), res.device_bytes);
    CHECK(got == std::vector<float>({7, 8, 9, 10, 7, 8, 9, 10}));
    CHECK(rt->live == live + 1);
  }
  CHECK(rt->live == live);  // freed with the result
}

TEST_CASE("device fusion pool: buffers are reused; a wait for one has a deadline") {
  HostOps ops;
  DeviceFusionPool pool(&ops, std::chrono::milliseconds(50));
  std::vector<DeviceFusionPool::Lease> out;
  for (size_t i = 0; i < DeviceFusionPool::kMaxBuffers; ++i) {
    auto lease = pool.Acquire(64);
    REQUIRE(lease.ok());
    REQUIRE(lease.value()->bytes >= 64);
    out.push_back(lease.value());
  }
  auto late = pool.Acquire(64);  // every buffer is out and none comes back
  REQUIRE_FALSE(late.ok());
  CHECK(late.status().code() == Code::kDeadlineExceeded);
  CHECK_THAT(late.status().message(), Catch::Contains("fusion buffers stayed in use"));
  void* first = out[0]->ptr;
  out.erase(out.begin());  // a bucket finished: its buffer comes back and is handed out again
  auto again = pool.Acquire(32);
  REQUIRE(again.ok());
  CHECK(again.value()->ptr == first);
  out.clear();
}

}  // namespace
}  // namespace hora
