// The Engine with ranks as threads in one process: a real coordinator, real gRPC, real Gloo.
#include "runtime/engine.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/runtime/engine_threads.h"

using namespace hora;

using namespace hora::testing;

// Every rank checks its place in the topology, then allreduces 40 tensors submitted in a
// different order on each rank.
std::vector<std::string> RunFusedAllreduce(int size,
                                           const std::function<void(Options*)>& tweak = nullptr) {
  return RunRanks(
      size,
      [size](int rank, Engine& e) -> std::string {
        if (e.self().rank != rank) return "wrong rank";
        int hosts = size == 1 ? 1 : 2;
        if (e.self().cross_size != hosts)
          return "cross_size " + std::to_string(e.self().cross_size);
        if (e.self().local_rank != rank / 2)
          return "local_rank " + std::to_string(e.self().local_rank);
        const int kTensors = 40;
        std::vector<std::vector<float>> bufs(kTensors);
        std::vector<int64_t> handles;
        for (int i = 0; i < kTensors; ++i) {
          int t = (i * 7 + rank * 13) % kTensors;  // a different order on each rank
          bufs[t].assign(1 + t * 37, static_cast<float>(rank + t));
          auto h = Allreduce(e, "t" + std::to_string(t), &bufs[t],
                             t % 2 ? ReduceOp::kSum : ReduceOp::kAverage);
          if (!h.ok()) return h.status().ToString();
          handles.push_back(h.value());
        }
        for (int64_t h : handles) {
          Status s = e.handles().Wait(h, std::chrono::seconds(30));
          if (!s.ok()) return s.ToString();
          if (Status r = e.handles().Release(h); !r.ok()) return "release: " + r.ToString();
        }
        for (int t = 0; t < kTensors; ++t) {
          float sum = 0;
          for (int r = 0; r < size; ++r) sum += r + t;
          float want = t % 2 ? sum : sum / size;
          for (float v : bufs[t]) {
            if (std::abs(v - want) > 1e-4f * std::max(1.0f, std::abs(want))) {
              return "tensor " + std::to_string(t) + " got " + std::to_string(v) + " want " +
                     std::to_string(want);
            }
          }
        }
        return e.handles().size() == 0 ? "" : "handles left behind";
      },
      tweak);
}

TEST_CASE("engine: topology and fused allreduce for 1, 2, 3, 4 and 7 ranks") {
  for (int size : {1, 2, 3, 4, 7}) {
    auto errors = RunFusedAllreduce(size);
    for (int r = 0; r < size; ++r) {
      INFO("size " << size << " rank " << r);
      REQUIRE(errors[r] == "");
    }
  }
}

// The odd ranks share a host without rank 0: rank 1 relays the others' control plane (and
// their store calls: the gloo rendezvous), with and without the steady path.
TEST_CASE("engine: the same through a host relay") {
  for (const char* steady : {"off", "auto"}) {
    for (int size : {4, 7}) {
      auto errors = RunFusedAllreduce(size, [steady](Options* o) {
        o->host_relay = "on";
        o->steady = steady;
      });
      for (int r = 0; r < size; ++r) {
        INFO("steady " << steady << " size " << size << " rank " << r);
        REQUIRE(errors[r] == "");
      }
    }
  }
}

TEST_CASE("engine: a mismatched shape fails on every rank and the job goes on") {
  const int size = 3;
  auto errors = RunRanks(size, [](int rank, Engine& e) -> std::string {
    std::vector<float> a(rank == 2 ? 5 : 4, 1.0f);
    auto h = Allreduce(e, "w", &a, ReduceOp::kSum);
    if (!h.ok()) return h.status().ToString();
    Status s = e.handles().Wait(h.value(), std::chrono::seconds(30));
    if (s.code() != Code::kMismatch) return "want MISMATCH, got " + s.ToString();
    if (s.message().find("shape") == std::string::npos ||
        s.message().find("rank 2") == std::string::npos) {
      return "message does not name the field and rank: " + s.message();
    }
    std::vector<float> b(3, 2.0f);
    auto h2 = Allreduce(e, "after", &b, ReduceOp::kSum);
    if (!h2.ok()) return h2.status().ToString();
    Status s2 = e.handles().Wait(h2.value(), std::chrono::seconds(30));
    if (!s2.ok()) return s2.ToString();
    return b[0] == 6.0f ? "" : "wrong sum after mismatch";
  });
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    REQUIRE(errors[r] == "");
  }
}

TEST_CASE("engine: a name already in flight is rejected; shutdown fails pending operations") {
  // Rank 0 stays up until rank 1 has checked the duplicate: a rank 0 that shut down first
  // aborts the job, and the duplicate would then be refused as ABORTED instead.
  std::atomic<bool> checked{false};
  auto errors = RunRanks(2, [&checked](int rank, Engine& e) -> std::string {
    std::vector<float> a(4, 1.0f);
    if (rank == 0) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      while (!checked.load()) {
        if (std::chrono::steady_clock::now() > deadline) return "rank 1 never checked";
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
    if (rank == 1) {
      // Only rank 1 submits: the operation stays pending until shutdown.
      auto h = Allreduce(e, "lonely", &a, ReduceOp::kSum);
      if (!h.ok()) return h.status().ToString();
      auto dup = Allreduce(e, "lonely", &a, ReduceOp::kSum);
      checked.store(true);
      if (dup.ok() || dup.status().code() != Code::kAlreadyExists) {
        return "want ALREADY_EXISTS for the duplicate, got " +
               (dup.ok() ? std::string("OK") : dup.status().ToString());
      }
      if (Status down = e.Shutdown(); !down.ok()) return "shutdown: " + down.ToString();
      Status s = e.handles().Wait(h.value(), std::chrono::seconds(10));
      if (s.code() != Code::kAborted) return "want ABORTED after shutdown, got " + s.ToString();
    }
    return "";
  });
  REQUIRE(errors[0] == "");
  REQUIRE(errors[1] == "");
}

TEST_CASE("engine: a burst of notices goes out in a few messages, a blocking loop one by one") {
  // Ranks 0 and 2 submit 200 allreduces at once before rank 1 submits any, so no plan can
  // answer their notices meanwhile: past CoordinatorClient::kUnbatchedNotices they are held
  // and go out together (at the latest each cycle time). Then 20 blocking calls: each
  // notice is answered before the next one, so each goes out at once, alone.
  constexpr int kBurst = 200, kLoop = 20;
  std::atomic<int> submitted{0};
  std::vector<ControlCounters> burst(3), loop(3);
  auto errors = RunRanks(
      3,
      [&](int rank, Engine& e) -> std::string {
        if (rank == 1) {
          const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
          while (submitted.load() < 2) {
            if (std::chrono::steady_clock::now() > deadline) return "the others never submitted";
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        }
        const ControlCounters before = e.ControlSent();
        std::vector<std::vector<float>> bufs(kBurst, std::vector<float>(8, 1.0f));
        std::vector<int64_t> handles;
        for (int i = 0; i < kBurst; ++i) {
          auto h = Allreduce(e, "burst." + std::to_string(i), &bufs[i], ReduceOp::kSum);
          if (!h.ok()) return h.status().ToString();
          handles.push_back(h.value());
        }
        if (rank != 1) submitted.fetch_add(1);
        for (int64_t h : handles) {
          Status s = e.handles().Wait(h, std::chrono::seconds(60));
          (void)e.handles().Release(h);
          if (!s.ok()) return s.ToString();
        }
        for (const auto& b : bufs) {
          if (b[0] != 3.0f) return "a burst tensor got " + std::to_string(b[0]);
        }
        const ControlCounters middle = e.ControlSent();
        for (int i = 0; i < kLoop; ++i) {
          std::vector<float> v(8, 1.0f);
          auto h = Allreduce(e, "loop", &v, ReduceOp::kSum);
          if (!h.ok()) return h.status().ToString();
          Status s = e.handles().Wait(h.value(), std::chrono::seconds(60));
          (void)e.handles().Release(h.value());
          if (!s.ok()) return s.ToString();
          if (v[0] != 3.0f) return "a loop tensor got " + std::to_string(v[0]);
        }
        const ControlCounters after = e.ControlSent();
        burst[rank] = {middle.messages - before.messages, middle.notices - before.notices};
        loop[rank] = {after.messages - middle.messages, after.notices - middle.notices};
        return "";
      },
      [](Options* o) { o->steady = "off"; });  // every loop call goes to the coordinator
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r << ": " << errors[r] << "; burst " << burst[r].messages << " messages, "
                 << burst[r].notices << " notices; loop " << loop[r].messages << ", "
                 << loop[r].notices);
    REQUIRE(errors[r].empty());
    CHECK(burst[r].notices == kBurst);
    CHECK(loop[r].notices == kLoop);
    CHECK(loop[r].messages == kLoop);
    // Rank 1's notices are answered as they arrive (the others' are all in): it may send
    // them one by one. Ranks 0 and 2 hold theirs (200 without batching).
    if (r != 1) CHECK(burst[r].messages < kBurst / 4);
  }
}

// CPU send/recv go straight between the two ranks (runtime/peer_transfers.h): a ping-pong of
// 100 round trips costs the coordinator nothing, on either rank.
TEST_CASE("engine: CPU send/recv send nothing to the coordinator") {
  constexpr int kRounds = 100;
  std::vector<ControlCounters> sent(2);
  auto errors = RunRanks(2, [&](int rank, Engine& e) -> std::string {
    TensorSpec spec;
    spec.shape = {16};
    std::vector<float> buf(16, 0.0f);
    auto step = [&](bool send, int tag) -> std::string {
      auto h = send ? e.EnqueueSend(spec, buf.data(), 1 - rank, tag)
                    : e.EnqueueRecv(spec, buf.data(), 1 - rank, tag);
      if (!h.ok()) return h.status().ToString();
      Status s = e.handles().Wait(h.value(), std::chrono::seconds(30));
      (void)e.handles().Release(h.value());
      return s.ok() ? "" : s.ToString();
    };
    const ControlCounters before = e.ControlSent();
    for (int i = 0; i < kRounds; ++i) {
      if (rank == 0) {
        buf.assign(16, static_cast<float>(i));
        if (auto err = step(true, 1); !err.empty()) return err;
        if (auto err = step(false, 2); !err.empty()) return err;
        if (buf[15] != static_cast<float>(i + 1)) return "round " + std::to_string(i);
      } else {
        if (auto err = step(false, 1); !err.empty()) return err;
        for (float& v : buf) v += 1.0f;
        if (auto err = step(true, 2); !err.empty()) return err;
      }
    }
    const ControlCounters after = e.ControlSent();
    sent[rank] = {after.messages - before.messages, after.notices - before.notices};
    return "";
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[r]);
    REQUIRE(errors[r].empty());
    CHECK(sent[r].messages == 0);
    CHECK(sent[r].notices == 0);
  }
}

// Names made anew for each call (IsOneShotName: a transfer's, an unnamed call's) are forgotten
// by the rank and by the coordinator once planned: a long job keeps none of them. A repeated
// name keeps its one id.
TEST_CASE("engine: one-shot names leave no ids behind on the rank or at the coordinator") {
  constexpr int kCalls = 300;
  std::vector<Engine::KnownNames> known(2);
  auto errors = RunRanks(2, [&](int rank, Engine& e) -> std::string {
    auto wait = [&e](StatusOr<int64_t> h) -> std::string {
      if (!h.ok()) return h.status().ToString();
      Status s = e.handles().Wait(h.value(), std::chrono::seconds(30));
      (void)e.handles().Release(h.value());
      return s.ok() ? "" : s.ToString();
    };
    TensorSpec spec;
    spec.shape = {4};
    for (int i = 0; i < kCalls; ++i) {
      std::vector<float> buf(4, static_cast<float>(rank + i));
      auto t =
          rank == 0 ? e.EnqueueSend(spec, buf.data(), 1, 7) : e.EnqueueRecv(spec, buf.data(), 0, 7);
      if (auto err = wait(t); !err.empty()) return "transfer " + std::to_string(i) + ": " + err;
      if (buf[0] != static_cast<float>(i)) return "transfer " + std::to_string(i) + ": wrong data";
      std::vector<float> a(4, 1.0f), w(4, 1.0f);
      if (auto err =
              wait(Allreduce(e, "allreduce.noname." + std::to_string(i), &a, ReduceOp::kSum));
          !err.empty()) {
        return "unnamed " + std::to_string(i) + ": " + err;
      }
      if (auto err = wait(Allreduce(e, "w", &w, ReduceOp::kSum)); !err.empty()) return err;
      if (a[0] != 2.0f || w[0] != 2.0f) return "wrong sum at " + std::to_string(i);
    }
    known[rank] = e.Known();
    return "";
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << errors[r] << "; known here " << known[r].rank
                 << ", at the coordinator " << known[r].coordinator);
    REQUIRE(errors[r].empty());
    // "w" alone (the last one-shot name of each kind may still be held while its plan is
    // read: a few at most); without forgetting, 2 x kCalls.
    CHECK(known[r].rank <= 3);
  }
  CHECK(known[0].coordinator <= 6);  // both ranks' tables
  CHECK(known[1].coordinator == 0);  // no coordinator on rank 1
}
