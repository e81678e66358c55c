// The runtime's path for device tensors through real engines (threads), a real coordinator
// and real gloo, without a GPU: the "device" is host memory behind collectives/device.h (a
// test DeviceRuntime registered for Device::kCuda) and the device backend is a test backend
// ("hostdev", for CUDA tensors) whose communicator is a gloo communicator exposing host
// DeviceOps. What runs is the product's runtime: validation accepting CUDA tensors, the
// ready events recorded at enqueue, the set's CUDA communicator created lazily and
// collectively on its first CUDA bucket (HORA_GPU_OPERATIONS), device fusion buffers with
// prescale/postscale, device results, CPU and CUDA tensors in one job, and a CUDA
// tensor no backend can serve refused on every rank while the job goes on. The NCCL backend itself
// needs a GPU (tests/collectives/nccl_gpu_test.cc).
#include <atomic>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <cstring>

#include "collectives/device.h"
#include "collectives/registry.h"
#include "common/reduce.h"
#include "tests/runtime/engine_threads.h"

namespace hora {
namespace {

class HostEvent : public DeviceEvent {};

std::atomic<int> g_events{0};

class HostRuntime : public DeviceRuntime {
 public:
  Status Probe(int index) const override {
    return index == 0 ? Status::Ok()
                      : InvalidArgument("host device " + std::to_string(index) + " does not exist");
  }
  std::string Describe() const override { return "host memory standing in for a device"; }
  StatusOr<std::shared_ptr<DeviceEvent>> RecordEvent(int, void*) const override {
    ++g_events;
    return std::shared_ptr<DeviceEvent>(std::make_shared<HostEvent>());
  }
  Status Copy(int, void* dst, const void* src, size_t bytes, void*) const override {
    std::memcpy(dst, src, bytes);
    return Status::Ok();
  }
  StatusOr<void*> Allocate(int, size_t bytes) const override {
    return std::malloc(bytes == 0 ? 1 : bytes);
  }
  void Free(int, void* p) const override { std::free(p); }
};

class HostOps : public DeviceOps {
 public:
  StatusOr<void*> Allocate(size_t bytes) override { return std::malloc(bytes == 0 ? 1 : bytes); }
  void Free(void* p) override { std::free(p); }
  Status WaitEvent(const DeviceEvent& e) override {
    return dynamic_cast<const HostEvent*>(&e) ? Status::Ok() : Internal("not a host event");
  }
  Status ScaleCopy(const std::vector<DeviceCopySpan>& spans, DataType dtype,
                   double scale) override {
    for (const auto& s : spans) hora::ScaleCopy(s.dst, s.src, s.count, dtype, scale);
    return Status::Ok();
  }
  Status Zero(void* dst, size_t bytes) override {
    std::memset(dst, 0, bytes);
    return Status::Ok();
  }
};

// A synchronous (gloo) communicator over host memory, exposing host DeviceOps.
class HostDeviceComm : public Communicator {
 public:
  explicit HostDeviceComm(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  const char* name() const override { return "hostdev"; }
  DeviceOps* device_ops() override { return &ops_; }
  Status Allreduce(void* b, size_t n, DataType t, ReduceOp op) override {
    return inner_->Allreduce(b, n, t, op);
  }
  Status Broadcast(void* b, size_t n, int root) override { return inner_->Broadcast(b, n, root); }
  Status Allgatherv(const void* in, void* out, const std::vector<size_t>& b) override {
    return inner_->Allgatherv(in, out, b);
  }
  Status Alltoallv(const void* in, const std::vector<size_t>& s, void* out,
                   const std::vector<size_t>& r) override {
    return inner_->Alltoallv(in, s, out, r);
  }
  Status Reducescatter(const void* in, void* out, const std::vector<size_t>& c, DataType t,
                       ReduceOp op) override {
    return inner_->Reducescatter(in, out, c, t, op);
  }
  Status Barrier() override { return inner_->Barrier(); }
  Status Send(const void* b, size_t n, int p, uint32_t t) override {
    return inner_->Send(b, n, p, t);
  }
  Status Recv(void* b, size_t n, int p, uint32_t t) override { return inner_->Recv(b, n, p, t); }
  void Abort(const Status& s) override { inner_->Abort(s); }

 private:
  std::unique_ptr<Communicator> inner_;
  HostOps ops_;
};

std::atomic<int> g_created{0};

void RegisterHostDevice() {
  static const bool done = [] {
    static HostRuntime runtime;
    RegisterDeviceRuntime(Device::kCuda, &runtime);  // replaces the CUDA runtime here
    BackendInfo info;
    info.name = "hostdev";
    info.device = Device::kCuda;
    info.auto_priority = 0;
    info.can_reduce = [](DataType t) {
      return t == DataType::kInt16 ? InvalidArgument("hostdev cannot reduce int16 (test)")
                                   : Status::Ok();
    };
    info.create = [](const BackendConfig& c) -> StatusOr<std::unique_ptr<Communicator>> {
      BackendConfig cpu = c;
      cpu.device = Device::kCpu;
      auto inner = CreateCommunicator("gloo", "hostdev", cpu);
      if (!inner.ok()) return inner.status();
      ++g_created;
      return std::unique_ptr<Communicator>(new HostDeviceComm(std::move(inner).value()));
    };
    RegisterBackend(std::move(info));
    BackendInfo broken;
    broken.name = "hostdev_broken";
    broken.device = Device::kCuda;
    broken.create = [](const BackendConfig&) -> StatusOr<std::unique_ptr<Communicator>> {
      return Unavailable("test: this device communicator cannot be created");
    };
    return RegisterBackend(std::move(broken));
  }();
  (void)done;
}

TensorSpec Spec(const std::string& name, CollectiveType c, std::vector<int64_t> shape,
                Device device = Device::kCuda) {
  TensorSpec s;
  s.name = name;
  s.collective = c;
  s.dtype = DataType::kFloat32;
  s.shape = std::move(shape);
  s.device = device;
  return s;
}

std::string Expect(bool ok, const std::string& what) { return ok ? "" : what; }

TEST_CASE("engine: CUDA tensors run on the set's lazily created device communicator") {
  RegisterHostDevice();
  const int size = 3;
  const int created_before = g_created.load();
  auto errors = testing::RunRanks(
      size,
      [&](int rank, Engine& e) -> std::string {
        // A fused allreduce of CUDA tensors with prescale 2 and Average (postscale 1/size * 3).
        std::vector<std::vector<float>> bufs;
        std::vector<int64_t> handles;
        for (int i = 0; i < 5; ++i) bufs.push_back(std::vector<float>(7 + i, float(rank + i)));
        for (int i = 0; i < 5; ++i) {
          TensorSpec s = Spec("dev.ar." + std::to_string(i), CollectiveType::kAllreduce,
                              {static_cast<int64_t>(bufs[i].size())});
          s.op = ReduceOp::kAverage;
          s.prescale = 2.0;
          s.postscale = 3.0;
          auto h = e.Enqueue(s, bufs[i].data(), bufs[i].data(), reinterpret_cast<void*>(0x1));
          if (!h.ok()) return "enqueue: " + h.status().ToString();
          handles.push_back(h.value());
        }
        // A CPU allreduce in flight at the same time.
        std::vector<float> cpu(5, float(rank));
        auto hc = testing::Allreduce(e, "cpu.ar", &cpu, ReduceOp::kSum);
        if (!hc.ok()) return "cpu enqueue: " + hc.status().ToString();
        for (int i = 0; i < 5; ++i) {
          Status s = e.handles().Wait(handles[i], std::chrono::seconds(60));
          if (!s.ok()) return "dev.ar." + std::to_string(i) + ": " + s.ToString();
          // mean over ranks of (r + i) = 1 + i; * 2 * 3.
          for (float v : bufs[i]) {
            if (v != float(6 * (1 + i)))
              return "dev.ar." + std::to_string(i) + " got " + std::to_string(v);
          }
        }
        Status s = e.handles().Wait(hc.value(), std::chrono::seconds(60));
        if (!s.ok()) return "cpu.ar: " + s.ToString();
        for (float v : cpu)
          if (v != 3.0f) return "cpu.ar got " + std::to_string(v);

        // Allgather with uneven first dimensions: the result is device memory.
        std::vector<float> mine(2 * (rank + 1), float(rank));
        void* const stream = reinterpret_cast<void*>(0x2);  // the framework's stream
        auto hg = e.Enqueue(Spec("dev.ag", CollectiveType::kAllgather, {rank + 1, 2}), mine.data(),
                            nullptr, stream);
        if (!hg.ok()) return "allgather enqueue: " + hg.status().ToString();
        s = e.handles().Wait(hg.value(), std::chrono::seconds(60));
        if (!s.ok()) return "dev.ag: " + s.ToString();
        std::string bad;
        Status r = e.handles().WithResult(hg.value(), [&](const OpResult& res) {
          if (!res.device_data || !res.data.empty())
            bad = "allgather result is not device memory";
          else if (res.shape != std::vector<int64_t>({6, 2}))
            bad = "allgather shape";
          else if (res.device_stream != stream)  // hora_result_copy copies on it
            bad = "allgather result without the request's stream";
          else {
            const float* f = static_cast<const float*>(res.device_data.get());
            const float want[12] = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
            if (res.device_bytes != sizeof(want) || std::memcmp(f, want, sizeof(want)) != 0) {
              bad = "allgather data";
            }
          }
          return Status::Ok();
        });
        if (!r.ok()) return "result: " + r.ToString();
        if (!bad.empty()) return bad;

        // Broadcast of two CUDA tensors from rank 1 (fused).
        std::vector<float> b1(3, float(rank)), b2(4, float(rank * 10));
        auto h1 = e.Enqueue(
            [] {
              auto s = Spec("dev.bc1", CollectiveType::kBroadcast, {3});
              s.root = 1;
              return s;
            }(),
            b1.data(), b1.data(), nullptr);
        auto h2 = e.Enqueue(
            [] {
              auto s = Spec("dev.bc2", CollectiveType::kBroadcast, {4});
              s.root = 1;
              return s;
            }(),
            b2.data(), b2.data(), nullptr);
        if (!h1.ok() || !h2.ok()) return "broadcast enqueue";
        if (!e.handles().Wait(h1.value(), std::chrono::seconds(60)).ok() ||
            !e.handles().Wait(h2.value(), std::chrono::seconds(60)).ok()) {
          return "broadcast wait";
        }
        for (float v : b1)
          if (v != 1.0f) return "dev.bc1 got " + std::to_string(v);
        for (float v : b2)
          if (v != 10.0f) return "dev.bc2 got " + std::to_string(v);

        // A device index the device runtime refuses: every rank gets the error, the job goes on.
        TensorSpec s7 = Spec("dev.bad", CollectiveType::kAllreduce, {2});
        s7.device_index = 7;
        std::vector<float> two(2, 1.0f);
        auto hb = e.Enqueue(s7, two.data(), two.data(), nullptr);
        if (hb.ok() ||
            hb.status().message().find("host device 7 does not exist") == std::string::npos) {
          return "bad device index: " +
                 (hb.ok() ? std::string("accepted") : hb.status().ToString());
        }
        std::vector<float> after(3, 1.0f);
        auto ha = testing::Allreduce(e, "cpu.after", &after, ReduceOp::kSum);
        if (!ha.ok() || !e.handles().Wait(ha.value(), std::chrono::seconds(60)).ok())
          return "cpu after";
        return Expect(after[0] == 3.0f, "cpu.after value");
      },
      [](Options* o) { o->gpu_operations = "hostdev"; });
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
  CHECK(g_created.load() - created_before == size);  // one device communicator per member
  CHECK(g_events.load() > 0);                        // ready events recorded at enqueue
}

TEST_CASE("engine: CUDA tensors no backend can serve are refused on every rank; the job goes on") {
  RegisterHostDevice();
  // "auto" for CUDA tensors picks nccl here, which cannot serve without a usable GPU (the
  // test's device runtime accepts the tensors): the enqueue is refused with the registry's
  // reasons, instead of a bucket failing and breaking the job.
  auto errors = testing::RunRanks(2, [&](int rank, Engine& e) -> std::string {
    for (int i = 0; i < 2; ++i) {
      std::vector<float> buf(4, float(rank));
      auto h = e.Enqueue(Spec("dev.nogpu." + std::to_string(i), CollectiveType::kAllreduce, {4}),
                         buf.data(), buf.data(), nullptr);
      if (h.ok()) return "a CUDA tensor was accepted without a device backend";
      const std::string m = h.status().message();
      if (m.find("HORA_GPU_OPERATIONS=auto: no built backend can serve cuda tensors") ==
              std::string::npos ||
          m.find("nccl: ") == std::string::npos) {
        return "error: " + h.status().ToString();
      }
    }
    std::vector<float> after(3, 1.0f);
    auto ha = testing::Allreduce(e, "cpu.after", &after, ReduceOp::kSum);
    if (!ha.ok() || !e.handles().Wait(ha.value(), std::chrono::seconds(60)).ok())
      return "cpu after";
    return Expect(after[0] == 2.0f, "cpu.after value");
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
}

TEST_CASE(
    "engine: a dtype the device backend cannot reduce is refused at enqueue; the job goes on") {
  RegisterHostDevice();
  // As NCCL with int16: refused on every rank before any bucket, where the backend would
  // otherwise fail the bucket and break the job. Moving the same tensor is accepted.
  auto errors = testing::RunRanks(
      2,
      [&](int rank, Engine& e) -> std::string {
        std::vector<int16_t> buf(4, int16_t(rank + 1));
        for (CollectiveType c : {CollectiveType::kAllreduce, CollectiveType::kReducescatter}) {
          TensorSpec s = Spec("dev.i16." + std::to_string(int(c)), c, {4});
          s.dtype = DataType::kInt16;
          auto h = e.Enqueue(s, buf.data(), buf.data(), nullptr);
          if (h.ok()) return "an int16 reduction was accepted";
          if (h.status().code() != Code::kInvalidArgument ||
              h.status().message().find("HORA_GPU_OPERATIONS=hostdev: backend 'hostdev': hostdev "
                                        "cannot reduce int16") == std::string::npos) {
            return "refusal: " + h.status().ToString();
          }
        }
        TensorSpec b = Spec("dev.i16.bc", CollectiveType::kBroadcast, {4});
        b.dtype = DataType::kInt16;
        auto hb = e.Enqueue(b, buf.data(), buf.data(), nullptr);
        if (!hb.ok()) return "int16 broadcast: " + hb.status().ToString();
        if (Status s = e.handles().Wait(hb.value(), std::chrono::seconds(60)); !s.ok())
          return "int16 broadcast: " + s.ToString();
        if (buf[0] != 1) return "int16 broadcast got " + std::to_string(buf[0]);
        std::vector<float> after(4, 1.0f);
        auto ha = e.Enqueue(Spec("dev.after", CollectiveType::kAllreduce, {4}), after.data(),
                            after.data(), nullptr);
        if (!ha.ok() || !e.handles().Wait(ha.value(), std::chrono::seconds(60)).ok())
          return "float32 after";
        return Expect(after[0] == 2.0f, "dev.after value");
      },
      [](Options* o) { o->gpu_operations = "hostdev"; });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
}

TEST_CASE("engine: a device communicator whose creation fails fails the bucket and the job") {
  RegisterHostDevice();
  // The creation is collective: a member that could not create it leaves the others without
  // a peer, so the failure breaks the job (bounded), naming the set, the device and why.
  auto errors = testing::RunRanks(
      2,
      [&](int rank, Engine& e) -> std::string {
        std::vector<float> buf(4, float(rank));
        auto h = e.Enqueue(Spec("dev.broken", CollectiveType::kAllreduce, {4}), buf.data(),
                           buf.data(), nullptr);
        if (!h.ok()) return "enqueue: " + h.status().ToString();
        Status s = e.handles().Wait(h.value(), std::chrono::seconds(60));
        if (s.ok()) return "the bucket succeeded";
        if (s.message().find("cannot be created") == std::string::npos)
          return "error: " + s.ToString();
        if (e.AsyncError().ok()) return "the job is not broken";
        return "";
      },
      [](Options* o) { o->gpu_operations = "hostdev_broken"; });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
}

}  // namespace
}  // namespace hora
