// The backend registry and the backends it builds, ranks as threads: selection and its
// errors, every registered CPU backend at 1, 2, 3, 4 and 7 ranks (allreduce, send/recv in a
// ring), the asynchronous loopback backend's Fence, and Abort ending a blocked receive.
#include "collectives/registry.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "tests/harness/memory_store.h"

using namespace hora;

namespace {

BackendConfig ConfigFor(int rank, int size, KvStore* store, const std::string& prefix) {
  BackendConfig c;
  c.process_set = 5;
  c.rank = rank;
  for (int r = 0; r < size; ++r) {
    c.global_ranks.push_back(r * 2);  // a set of the job's even ranks
    c.hostnames.push_back("host");
  }
  c.store = store;
  c.key_prefix = prefix;
  c.timeout = std::chrono::milliseconds(10000);
  return c;
}

// Runs body on `size` threads, each with its communicator from the registry.
std::vector<std::string> RunRanks(const std::string& backend, int size,
                                  const std::function<std::string(Communicator&)>& body,
                                  MemoryStore* store) {
  std::vector<std::string> errors(size);
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto comm = CreateCommunicator(backend, "HORA_CPU_OPERATIONS",
                                     ConfigFor(r, size, store, "test/" + backend + "/"));
      if (!comm.ok()) {
        errors[r] = comm.status().ToString();
        return;
      }
      errors[r] = body(*comm.value());
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

// Waits for the communicator's work (asynchronous backends) and returns its status.
Status Done(Communicator& c) {
  std::unique_ptr<Work> w = c.Fence();
  if (!w) return Status::Ok();
  Status s;
  while (!w->Test(&s)) std::this_thread::sleep_for(std::chrono::microseconds(50));
  return s;
}

std::string AllFine(const std::vector<std::string>& errors) {
  std::string out;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) out += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
  }
  return out;
}

}  // namespace

TEST_CASE("registry: the built list, selection, and errors that name the option") {
  REQUIRE(IsBackendBuilt("gloo"));
  REQUIRE(IsBackendBuilt("loopback"));
  REQUIRE_FALSE(IsBackendBuilt("nope"));
  const std::vector<std::string> built = BuiltBackends();
  REQUIRE(std::is_sorted(built.begin(), built.end()));
  REQUIRE(CheckSelection("auto", Device::kCpu, "X").ok());
  Status s = CheckSelection("mpi9", Device::kCpu, "HORA_CPU_OPERATIONS");
  REQUIRE(s.code() == Code::kInvalidArgument);
  REQUIRE(s.message().find("HORA_CPU_OPERATIONS=mpi9") != std::string::npos);
  REQUIRE(s.message().find("built: ") != std::string::npos);
  // A CUDA build stages CUDA tensors through a named CPU backend (never the reverse).
  s = CheckSelection("gloo", Device::kCuda, "HORA_GPU_OPERATIONS");
  if (IsBackendBuilt("nccl")) {
    REQUIRE(s.ok());
    s = CheckSelection("nccl", Device::kCpu, "HORA_CPU_OPERATIONS");
    REQUIRE(s.message().find("HORA_CPU_OPERATIONS=nccl: backend 'nccl' serves cuda tensors, not "
                             "cpu") != std::string::npos);
  } else {
    REQUIRE(s.message().find("serves cpu tensors, not cuda") != std::string::npos);
  }
  MemoryStore store;
  // auto never picks a test backend; on one host it takes shm (when built) over gloo.
  auto comm = CreateCommunicator("auto", "HORA_CPU_OPERATIONS", ConfigFor(0, 1, &store, "a/"));
  REQUIRE(comm.ok());
  REQUIRE(std::string(comm.value()->name()) == (IsBackendBuilt("shm") ? "shm" : "gloo"));
  // A set on two hosts: shm cannot serve it, auto falls back to gloo; naming shm says why.
  BackendConfig two_hosts = ConfigFor(0, 1, &store, "b/");
  two_hosts.global_ranks = {0, 1};
  two_hosts.hostnames = {"host-a", "host-b"};
  if (IsBackendBuilt("shm")) {
    auto refused = CreateCommunicator("shm", "HORA_CPU_OPERATIONS", two_hosts);
    REQUIRE_FALSE(refused.ok());
    REQUIRE(refused.status().message().find("HORA_CPU_OPERATIONS=shm: backend 'shm' cannot "
                                            "serve") != std::string::npos);
  }
  // No CUDA backend in a CPU build: "auto" for CUDA says what is built.
  BackendConfig cuda = ConfigFor(0, 1, &store, "c/");
  cuda.device = Device::kCuda;
  auto none = CreateCommunicator("auto", "HORA_GPU_OPERATIONS", cuda);
  if (!IsBackendBuilt("nccl")) {
    REQUIRE_FALSE(none.ok());
    REQUIRE(none.status().message().find("HORA_GPU_OPERATIONS=auto") != std::string::npos);
  }
}

TEST_CASE("registry: every CPU backend serves sets of 1, 2, 3, 4 and 7 ranks") {
  for (const char* backend : {"gloo", "loopback", "shm"}) {
    if (!IsBackendBuilt(backend)) continue;
    for (int size : {1, 2, 3, 4, 7}) {
      MemoryStore store;
      auto errors = RunRanks(
          backend, size,
          [size](Communicator& c) -> std::string {
            if (c.size() != size) return "size " + std::to_string(c.size());
            std::vector<float> x(1000, static_cast<float>(c.rank() + 1));
            Status s = c.Allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
            if (s.ok()) s = Done(c);
            if (!s.ok()) return "allreduce: " + s.ToString();
            const float want = size * (size + 1) / 2.0f;
            for (float v : x) {
              if (v != want) return "allreduce value " + std::to_string(v);
            }
            if (size == 1) return "";
            std::vector<int64_t> out(257, c.rank()), in(257, -1);
            const int next = (c.rank() + 1) % size, prev = (c.rank() + size - 1) % size;
            // Post the receive first on even ranks, the send first on odd ones.
            if (c.rank() % 2 == 0) {
              s = c.Recv(in.data(), in.size() * 8, prev, 3);
              if (s.ok()) s = c.Send(out.data(), out.size() * 8, next, 3);
            } else {
              s = c.Send(out.data(), out.size() * 8, next, 3);
              if (s.ok()) s = c.Recv(in.data(), in.size() * 8, prev, 3);
            }
            if (s.ok()) s = Done(c);
            if (!s.ok()) return "ring: " + s.ToString();
            for (int64_t v : in) {
              if (v != prev) return "ring value " + std::to_string(v);
            }
            return "";
          },
          &store);
      INFO(backend << " at " << size << " ranks");
      REQUIRE(AllFine(errors) == "");
    }
  }
}

TEST_CASE("loopback: calls only queue the work; Fence covers what was queued before it") {
  MemoryStore store;
  std::atomic<int> queued_before_peer{0};
  std::atomic<bool> rank0_tested{false};
  auto errors = RunRanks(
      "loopback", 2,
      [&](Communicator& c) -> std::string {
        std::vector<int32_t> x(10, c.rank() + 1);
        // Rank 1 joins only after rank 0 has queued its allreduce and found it unfinished.
        while (c.rank() == 1 && !rank0_tested)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        Status s = c.Allreduce(x.data(), x.size(), DataType::kInt32, ReduceOp::kSum);
        if (!s.ok()) return s.ToString();
        std::unique_ptr<Work> w = c.Fence();
        if (!w) return "no Work from an asynchronous backend";
        Status ws;
        if (c.rank() == 0) {
          if (!w->Test(&ws)) ++queued_before_peer;
          rank0_tested = true;
        }
        while (!w->Test(&ws)) std::this_thread::sleep_for(std::chrono::microseconds(100));
        if (!ws.ok()) return ws.ToString();
        return x[0] == 3 ? "" : "value " + std::to_string(x[0]);
      },
      &store);
  REQUIRE(AllFine(errors) == "");
  REQUIRE(queued_before_peer == 1);
  REQUIRE(store.size() <= 2);  // at most one collective key per member remains
}

TEST_CASE("registry backends: Abort ends a receive whose sender never sends") {
  for (const char* backend : {"gloo", "loopback", "shm"}) {
    if (!IsBackendBuilt(backend)) continue;
    MemoryStore store;
    std::atomic<Communicator*> receiver{nullptr};
    std::atomic<bool> done{false};
    std::atomic<bool> abort_returned{false};
    std::thread aborter([&] {
      while (receiver.load() == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      receiver.load()->Abort(PeerFailure("rank 1 (host h, pid 7) is lost: test"));
      abort_returned = true;
    });
    auto errors = RunRanks(
        backend, 2,
        [&](Communicator& c) -> std::string {
          if (c.rank() == 1) {  // never sends; waits until rank 0 is done
            while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
            return "";
          }
          std::vector<char> buf(64);
          receiver = &c;
          Status s = c.Recv(buf.data(), buf.size(), 1, 0);
          if (s.ok()) s = Done(c);
          // The receiver wakes while Abort may still run on the aborter's thread: the
          // communicator must outlive that call (RunRanks destroys it when this returns).
          while (!abort_returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
          done = true;
          if (s.code() != Code::kPeerFailure ||
              s.message().find("rank 1 (host h") == std::string::npos) {
            return "recv ended with " + s.ToString();
          }
          return "";
        },
        &store);
    aborter.join();
    INFO(backend);
    REQUIRE(AllFine(errors) == "");
  }
}

TEST_CASE("registry: mpi outside an MPI launcher is refused naming the option and why") {
  REQUIRE(IsBackendBuilt("mpi"));
  MemoryStore store;
  BackendConfig c = ConfigFor(0, 1, &store, "mpi/");
  c.global_ranks = {0, 1};
  c.hostnames = {"host-a", "host-b"};
  c.process_set = 0;
  // Bazel runs tests outside mpirun: OMPI_COMM_WORLD_SIZE is not set.
  auto refused = CreateCommunicator("mpi", "HORA_CPU_OPERATIONS", c);
  REQUIRE_FALSE(refused.ok());
  REQUIRE(refused.status().code() == Code::kFailedPrecondition);
  REQUIRE(refused.status().message().find("HORA_CPU_OPERATIONS=mpi: backend 'mpi' cannot serve") !=
          std::string::npos);
  REQUIRE(refused.status().message().find("OMPI_COMM_WORLD_SIZE is not set") != std::string::npos);
}
