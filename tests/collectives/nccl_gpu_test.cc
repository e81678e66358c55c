// Run on a machine with a GPU: bzl test --test_tag_filters=gpu //tests/collectives:nccl_gpu_test
// (or the binary itself, from tools/gpu_check.sh). The NCCL communicator at world size 1 (NCCL
// refuses two ranks on one GPU): every collective x dtype x op against the CPU reference of
// tests/collectives/dtype_values.h, completion through Fence(), Abort() ending calls and
// Works, bad dtypes and ops refused, and the device ops (copies, zeros) the runtime uses.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "collectives/device.h"
#include "collectives/nccl/nccl_communicator.h"
#include "tests/collectives/dtype_values.h"
#include "tests/harness/hang_bound.h"
#include "tests/harness/memory_store.h"

namespace hora {
namespace {

constexpr auto kTimeout = std::chrono::milliseconds(20000);

std::unique_ptr<Communicator> MakeComm(MemoryStore* store) {
  NcclConfig c;
  c.store = store;
  c.key_prefix = "gpu/";
  c.timeout = kTimeout;
  auto comm = CreateNcclCommunicator(c);
  INFO(comm.status().message());
  REQUIRE(comm.ok());
  return std::move(comm).value();
}

// NCCL has no 16-bit integer type: int16 and uint16 reductions are refused (moves of their
// bytes, broadcast, allgather, alltoall, are not).
bool NcclReduces(DataType t) { return t != DataType::kInt16 && t != DataType::kUint16; }

// Device memory freed at scope end.
struct DeviceBuf {
  explicit DeviceBuf(size_t bytes) : bytes(bytes) {
    REQUIRE(cudaMalloc(&ptr, bytes == 0 ? 1 : bytes) == cudaSuccess);
  }
  ~DeviceBuf() { cudaFree(ptr); }
  void Put(const void* host) {
    REQUIRE(cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<char> Get() const {
    std::vector<char> h(bytes);
    REQUIRE(cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
  void* ptr = nullptr;
  size_t bytes;
};

// Waits for the communicator's Fence (bounded); returns the Work's status.
Status Wait(Communicator* comm) {
  std::unique_ptr<Work> w = comm->Fence();
  REQUIRE(w != nullptr);  // the NCCL backend is asynchronous
  const auto end = std::chrono::steady_clock::now() + testing::HangBound(kTimeout);
  Status s;
  while (!w->Test(&s)) {
    REQUIRE(std::chrono::steady_clock::now() < end);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return s;
}

TEST_CASE("nccl allreduce: every dtype and op at size 1 matches the CPU reference") {
  MemoryStore store;
  auto comm = MakeComm(&store);
  CHECK(std::string(comm->name()) == "nccl");
  CHECK(comm->device_ops() != nullptr);
  for (DataType t : testing::kAllTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (size_t n : {size_t(0), size_t(1), size_t(1023), size_t(1 << 20)}) {
        INFO(testing::Label("allreduce", t, op, n));
        const size_t bytes = n * DataTypeSize(t);
        std::vector<char> in(bytes), want(bytes);
        testing::FillInput(t, op, 0, in.data(), n);
        testing::FillExpected(t, op, 1, want.data(), n);
        DeviceBuf d(bytes);
        d.Put(in.data());
        if (!NcclReduces(t)) {  // refused before anything is enqueued, whatever the count
          Status s = comm->Allreduce(d.ptr, n, t, op);
          CHECK(s.code() == Code::kInvalidArgument);
          CHECK_THAT(s.message(), Catch::Contains(DataTypeName(t)));
          continue;
        }
        REQUIRE(comm->Allreduce(d.ptr, n, t, op).ok());
        REQUIRE(Wait(comm.get()).ok());
        CHECK(d.Get() == want);
      }
    }
  }
}

TEST_CASE("nccl broadcast, allgatherv, reducescatter, alltoallv and barrier at size 1") {
  MemoryStore store;
  auto comm = MakeComm(&store);
  for (DataType t : testing::kAllTypes) {
    const size_t n = 777;
    const size_t bytes = n * DataTypeSize(t);
    INFO(DataTypeName(t));
    std::vector<char> in(bytes);
    testing::FillInput(t, ReduceOp::kSum, 0, in.data(), n);
    {
      DeviceBuf d(bytes);
      d.Put(in.data());
      REQUIRE(comm->Broadcast(d.ptr, bytes, 0).ok());
      REQUIRE(Wait(comm.get()).ok());
      CHECK(d.Get() == in);
    }
    {
      DeviceBuf src(bytes), dst(bytes);
      src.Put(in.data());
      REQUIRE(comm->Allgatherv(src.ptr, dst.ptr, {bytes}).ok());
      REQUIRE(Wait(comm.get()).ok());
      CHECK(dst.Get() == in);
    }
    for (ReduceOp op : testing::kAllOps) {
      INFO(ReduceOpName(op));
      std::vector<char> rin(bytes), want(bytes);
      testing::FillInput(t, op, 0, rin.data(), n);
      testing::FillExpected(t, op, 1, want.data(), n);
      DeviceBuf src(bytes), dst(bytes);
      src.Put(rin.data());
      if (!NcclReduces(t)) {
        Status s = comm->Reducescatter(src.ptr, dst.ptr, {n}, t, op);
        CHECK(s.code() == Code::kInvalidArgument);
        CHECK_THAT(s.message(), Catch::Contains(DataTypeName(t)));
        continue;
      }
      REQUIRE(comm->Reducescatter(src.ptr, dst.ptr, {n}, t, op).ok());
      REQUIRE(Wait(comm.get()).ok());
      CHECK(dst.Get() == want);
    }
    {
      DeviceBuf src(bytes), dst(bytes);
      src.Put(in.data());
      REQUIRE(comm->Alltoallv(src.ptr, {bytes}, dst.ptr, {bytes}).ok());
      REQUIRE(Wait(comm.get()).ok());
      CHECK(dst.Get() == in);
    }
  }
  REQUIRE(comm->Barrier().ok());
  CHECK(Wait(comm.get()).ok());
}

TEST_CASE("nccl refuses bad dtypes, Average, bad roots and peers, naming them") {
  MemoryStore store;
  auto comm = MakeComm(&store);
  DeviceBuf d(64);
  Status dtype = comm->Allreduce(d.ptr, 4, static_cast<DataType>(42), ReduceOp::kSum);
  CHECK(dtype.code() == Code::kInvalidArgument);
  CHECK_THAT(dtype.message(), Catch::Contains("42"));
  Status avg = comm->Allreduce(d.ptr, 4, DataType::kFloat32, ReduceOp::kAverage);
  CHECK(avg.code() == Code::kInvalidArgument);
  CHECK_THAT(avg.message(), Catch::Contains("average"));
  CHECK_THAT(comm->Broadcast(d.ptr, 8, 3).message(), Catch::Contains("root 3"));
  CHECK_THAT(comm->Send(d.ptr, 8, 0, 1).message(), Catch::Contains("this rank"));
  CHECK_THAT(comm->Allgatherv(d.ptr, d.ptr, {8, 8}).message(), Catch::Contains("2 sizes for 1"));
  // The communicator still works after refusals.
  REQUIRE(comm->Allreduce(d.ptr, 4, DataType::kFloat32, ReduceOp::kSum).ok());
  CHECK(Wait(comm.get()).ok());
}

TEST_CASE("nccl Fence covers everything queued before it, and Abort ends calls and Works") {
  MemoryStore store;
  auto comm = MakeComm(&store);
  const size_t n = 8 << 20;  // 32 MiB of float32: several kernels in flight
  std::vector<float> ones(n, 1.0f);
  DeviceBuf d(n * sizeof(float));
  d.Put(ones.data());
  for (int i = 0; i < 8; ++i)
    REQUIRE(comm->Allreduce(d.ptr, n, DataType::kFloat32, ReduceOp::kSum).ok());
  REQUIRE(Wait(comm.get()).ok());
  std::vector<char> got = d.Get();
  CHECK(std::memcmp(got.data(), ones.data(), got.size()) == 0);  // size 1: sum is identity

  for (int i = 0; i < 8; ++i)
    REQUIRE(comm->Allreduce(d.ptr, n, DataType::kFloat32, ReduceOp::kSum).ok());
  std::unique_ptr<Work> pending = comm->Fence();
  std::thread aborter([&] { comm->Abort(PeerFailure("rank 7 died (test)")); });
  aborter.join();
  Status s;
  const auto end = std::chrono::steady_clock::now() + testing::HangBound(kTimeout);
  while (!pending->Test(&s)) {
    REQUIRE(std::chrono::steady_clock::now() < end);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  CHECK(s.code() == Code::kPeerFailure);
  CHECK_THAT(s.message(), Catch::Contains("rank 7 died"));
  Status later = comm->Allreduce(d.ptr, n, DataType::kFloat32, ReduceOp::kSum);
  CHECK(later.code() == Code::kPeerFailure);
  CHECK_THAT(later.message(), Catch::Contains("rank 7 died"));
  comm->Abort(Internal("a second reason"));  // idempotent; the first reason sticks
  CHECK_THAT(comm->Barrier().message(), Catch::Contains("rank 7 died"));
  CHECK(Wait(comm.get()).code() == Code::kPeerFailure);
}

TEST_CASE("nccl device ops: allocation, stream-ordered copies and zeros, events") {
  MemoryStore store;
  auto comm = MakeComm(&store);
  DeviceOps* ops = comm->device_ops();
  REQUIRE(ops != nullptr);
  const DeviceRuntime* cuda = DeviceRuntimeFor(Device::kCuda);
  REQUIRE(cuda != nullptr);
  REQUIRE(cuda->Probe(0).ok());
  const size_t n = 1001;
  std::vector<double> in(n);
  for (size_t i = 0; i < n; ++i) in[i] = 0.5 * static_cast<double>(i);
  auto a = ops->Allocate(n * sizeof(double));
  auto b = ops->Allocate(n * sizeof(double));
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(cuda->Copy(0, a.value(), in.data(), n * sizeof(double), nullptr).ok());
  auto ready = cuda->RecordEvent(0, nullptr);
  REQUIRE(ready.ok());
  REQUIRE(ops->WaitEvent(*ready.value()).ok());
  REQUIRE(ops->Zero(b.value(), n * sizeof(double)).ok());
  REQUIRE(ops->ScaleCopy({{a.value(), b.value(), n / 2}}, DataType::kFloat64, 1.0).ok());
  REQUIRE(Wait(comm.get()).ok());
  std::vector<double> out(n, -1.0);
  REQUIRE(cuda->Copy(0, out.data(), b.value(), n * sizeof(double), nullptr).ok());
  for (size_t i = 0; i < n; ++i) {
    INFO(i);
    CHECK(out[i] == (i < n / 2 ? in[i] : 0.0));
  }
  ops->Free(a.value());
  ops->Free(b.value());
}

}  // namespace
}  // namespace hora
