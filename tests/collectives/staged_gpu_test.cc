// Run on a machine with a GPU (tools/gpu_check.sh runs the binary): CUDA tensors on CPU
// backends through pinned host memory (collectives/staged), ranks as threads sharing the one
// GPU, each communicator built by the registry as HORA_GPU_OPERATIONS=shm|gloo builds it.
// Every collective x dtype x op against tests/collectives/dtype_values.h's reference, the
// allreduce's chunked pipeline (several chunks), work queued on the communicator's stream
// before a collective seen by it, and Abort ending a receive that waits for a silent peer.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "collectives/device.h"
#include "collectives/registry.h"
#include "tests/collectives/dtype_values.h"
#include "tests/harness/hang_bound.h"
#include "tests/harness/memory_store.h"

namespace hora {
namespace {

constexpr auto kTimeout = std::chrono::milliseconds(20000);

BackendConfig ConfigFor(int rank, int size, KvStore* store) {
  BackendConfig c;
  c.rank = rank;
  for (int r = 0; r < size; ++r) {
    c.global_ranks.push_back(r);
    c.hostnames.push_back("gpu-host");
  }
  c.device = Device::kCuda;
  c.device_index = 0;
  c.store = store;
  c.key_prefix = "staged/";
  c.timeout = kTimeout;
  return c;
}

// Device memory freed at scope end; "" or the CUDA error.
struct DeviceBuf {
  explicit DeviceBuf(size_t bytes) : bytes(bytes) { cudaMalloc(&ptr, bytes == 0 ? 1 : bytes); }
  ~DeviceBuf() { cudaFree(ptr); }
  bool Put(const void* host) {
    return cudaMemcpy(ptr, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess;
  }
  std::vector<char> Get() const {
    std::vector<char> h(bytes);
    cudaMemcpy(h.data(), ptr, bytes, cudaMemcpyDeviceToHost);
    return h;
  }
  void* ptr = nullptr;
  size_t bytes;
};

// Waits for the communicator's Fence (bounded).
Status Wait(Communicator& comm) {
  std::unique_ptr<Work> w = comm.Fence();
  if (w == nullptr) return Internal("a staged communicator returned no Work");
  const auto end = std::chrono::steady_clock::now() + testing::HangBound(kTimeout);
  Status s;
  while (!w->Test(&s)) {
    if (std::chrono::steady_clock::now() > end) return DeadlineExceeded("Work never completed");
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  return s;
}

using Body = std::function<std::string(Communicator&)>;

// `size` ranks as threads, each with the registry's communicator for CUDA tensors on
// `backend`; one string per rank, "" when it passed.
std::vector<std::string> RunRanks(const std::string& backend, int size, const Body& body) {
  MemoryStore store;
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(0);
      auto comm = CreateCommunicator(backend, "HORA_GPU_OPERATIONS", ConfigFor(r, size, &store));
      if (!comm.ok()) {
        errors[r] = "create: " + comm.status().ToString();
        return;
      }
      if (comm.value()->device_ops() == nullptr) {
        errors[r] = "no device ops";
        return;
      }
      errors[r] = body(*comm.value());
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void RequireAllPassed(const std::vector<std::string>& errors) {
  for (size_t r = 0; r < errors.size(); ++r) {
    INFO("rank " << r);
    CHECK(errors[r] == "");
  }
}

TEST_CASE("staged allreduce: every dtype and op, one chunk and several, matches the reference") {
  for (const char* backend : {"shm", "gloo"}) {
    const int size = backend[0] == 's' ? 3 : 2;
    INFO(backend << " at " << size << " ranks");
    RequireAllPassed(RunRanks(backend, size, [size](Communicator& c) -> std::string {
      if (std::string(c.name()) != std::string("staged:") + (size == 3 ? "shm" : "gloo"))
        return std::string("name ") + c.name();
      for (DataType t : testing::kAllTypes) {
        for (ReduceOp op : testing::kAllOps) {
          // 9 MiB of 4-byte elements: four chunks (StagedConfig's default), the last short.
          for (size_t n : {size_t(0), size_t(1), size_t(1023), size_t(9 << 18) + 5}) {
            const size_t bytes = n * DataTypeSize(t);
            std::vector<char> in(bytes), want(bytes);
            testing::FillInput(t, op, c.rank(), in.data(), n);
            testing::FillExpected(t, op, size, want.data(), n);
            DeviceBuf d(bytes);
            if (!d.Put(in.data())) return "cudaMemcpy";
            Status s = c.Allreduce(d.ptr, n, t, op);
            if (s.ok()) s = Wait(c);
            if (!s.ok()) return testing::Label("allreduce", t, op, n) + ": " + s.ToString();
            if (d.Get() != want) return testing::Label("allreduce", t, op, n) + ": wrong result";
          }
        }
      }
      return "";
    }));
  }
}

TEST_CASE("staged broadcast, uneven allgatherv, alltoallv, reducescatter, send/recv, barrier") {
  const int size = 3;
  RequireAllPassed(RunRanks("shm", size, [](Communicator& c) -> std::string {
    const int r = c.rank(), n = c.size();
    // Broadcast from rank 1.
    std::vector<char> root(1001);
    for (size_t i = 0; i < root.size(); ++i) root[i] = char(i * 7 + 1);
    DeviceBuf b(root.size());
    std::vector<char> mine(root.size(), char(r));
    b.Put(r == 1 ? root.data() : mine.data());
    Status s = c.Broadcast(b.ptr, root.size(), 1);
    if (s.ok()) s = Wait(c);
    if (!s.ok() || b.Get() != root) return "broadcast: " + s.ToString();
    // Allgatherv: rank q gives q + 1 blocks of 100 bytes of value q.
    std::vector<size_t> sizes;
    std::vector<char> gathered;
    for (int q = 0; q < n; ++q) {
      sizes.push_back(100 * (q + 1));
      gathered.insert(gathered.end(), 100 * (q + 1), char(q));
    }
    std::vector<char> contribution(sizes[r], char(r));
    DeviceBuf gin(sizes[r]), gout(gathered.size());
    gin.Put(contribution.data());
    s = c.Allgatherv(gin.ptr, gout.ptr, sizes);
    if (s.ok()) s = Wait(c);
    if (!s.ok() || gout.Get() != gathered) return "allgatherv: " + s.ToString();
    // Alltoallv: to rank q, q + 1 bytes of value 10 * r + q.
    std::vector<size_t> send, recv;
    std::vector<char> out, expect;
    for (int q = 0; q < n; ++q) {
      send.push_back(q + 1);
      out.insert(out.end(), q + 1, char(10 * r + q));
      recv.push_back(r + 1);
      expect.insert(expect.end(), r + 1, char(10 * q + r));
    }
    DeviceBuf ain(out.size()), aout(expect.size());
    ain.Put(out.data());
    s = c.Alltoallv(ain.ptr, send, aout.ptr, recv);
    if (s.ok()) s = Wait(c);
    if (!s.ok() || aout.Get() != expect) return "alltoallv: " + s.ToString();
    // Reducescatter with uneven counts: rank q gets q + 2 floats, the sum over ranks.
    std::vector<size_t> counts;
    for (int q = 0; q < n; ++q) counts.push_back(q + 2);
    const size_t total = std::accumulate(counts.begin(), counts.end(), size_t(0));
    std::vector<float> rin(total, float(r + 1)), rwant(counts[r], float(n * (n + 1) / 2));
    DeviceBuf rsi(total * 4), rso(counts[r] * 4);
    rsi.Put(rin.data());
    s = c.Reducescatter(rsi.ptr, rso.ptr, counts, DataType::kFloat32, ReduceOp::kSum);
    if (s.ok()) s = Wait(c);
    std::vector<char> got = rso.Get();
    if (!s.ok() || std::memcmp(got.data(), rwant.data(), got.size()) != 0)
      return "reducescatter: " + s.ToString();
    // A ring of send/recv: the receive posted first on even ranks.
    const int next = (r + 1) % n, prev = (r + n - 1) % n;
    std::vector<char> token(333, char(r + 40)), want_token(333, char(prev + 40));
    DeviceBuf sbuf(token.size()), rbuf(token.size());
    sbuf.Put(token.data());
    if (r % 2 == 0) {
      s = c.Recv(rbuf.ptr, token.size(), prev, 9);
      if (s.ok()) s = c.Send(sbuf.ptr, token.size(), next, 9);
    } else {
      s = c.Send(sbuf.ptr, token.size(), next, 9);
      if (s.ok()) s = c.Recv(rbuf.ptr, token.size(), prev, 9);
    }
    if (s.ok()) s = Wait(c);
    if (!s.ok() || rbuf.Get() != want_token) return "send/recv: " + s.ToString();
    s = c.Barrier();
    if (s.ok()) s = Wait(c);
    return s.ok() ? "" : "barrier: " + s.ToString();
  }));
}

TEST_CASE("staged: work queued on the communicator's stream comes before the collective") {
  RequireAllPassed(RunRanks("shm", 2, [](Communicator& c) -> std::string {
    DeviceOps* ops = c.device_ops();
    const size_t n = 3 << 20;  // 12 MiB: the packing kernel runs well after the enqueue
    std::vector<float> ones(n, 1.0f);
    DeviceBuf src(n * 4), dst(n * 4);
    src.Put(ones.data());
    if (!ops->Zero(dst.ptr, n * 4).ok()) return "zero";
    // dst = src * 3 on the stream, then the allreduce of dst: 3 * size everywhere.
    if (!ops->ScaleCopy({{src.ptr, dst.ptr, n}}, DataType::kFloat32, 3.0).ok()) return "pack";
    Status s = c.Allreduce(dst.ptr, n, DataType::kFloat32, ReduceOp::kSum);
    if (s.ok()) s = Wait(c);
    if (!s.ok()) return "allreduce: " + s.ToString();
    std::vector<char> got = dst.Get();
    const float* f = reinterpret_cast<const float*>(got.data());
    for (size_t i = 0; i < n; i += 4099) {
      if (f[i] != 6.0f) return "element " + std::to_string(i) + " is " + std::to_string(f[i]);
    }
    return "";
  }));
}

TEST_CASE("staged: Abort ends a receive waiting for a silent peer, naming the reason") {
  RequireAllPassed(RunRanks("shm", 2, [](Communicator& c) -> std::string {
    if (c.rank() == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // never sends
      return "";
    }
    DeviceBuf buf(64);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      c.Abort(PeerFailure("rank 1 died (test)"));
    });
    const auto t0 = std::chrono::steady_clock::now();
    Status s = c.Recv(buf.ptr, 64, 1, 3);
    aborter.join();
    if (s.ok()) return "the receive succeeded";
    if (s.message().find("rank 1 died") == std::string::npos) return "reason: " + s.ToString();
    if (std::chrono::steady_clock::now() - t0 > testing::HangBound(std::chrono::seconds(5)))
      return "the abort took too long";
    Status later = c.Allreduce(buf.ptr, 4, DataType::kFloat32, ReduceOp::kSum);
    if (later.ok() || later.message().find("rank 1 died") == std::string::npos)
      return "a later call: " + later.ToString();
    Status w = Wait(c);
    return w.ok() ? "a Fence after the abort succeeded" : "";
  }));
}

}  // namespace
}  // namespace hora
