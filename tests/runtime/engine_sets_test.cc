// Process sets and point-to-point in the Engine, ranks as threads: per-set planning, sets on
// two backends, completion order across sets, collective add/remove errors, send/recv.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "tests/runtime/engine_threads.h"

using namespace hora;
using namespace hora::testing;

namespace {

std::string Check(bool ok, const std::string& what) { return ok ? "" : what; }

std::string Joined(const std::vector<std::string>& errors) {
  std::string out;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) out += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
  }
  return out;
}

// Waits for a handle; "" when it succeeded, else the status text.
std::string Wait(Engine& e, StatusOr<int64_t> h, double seconds = 30) {
  if (!h.ok()) return "enqueue: " + h.status().ToString();
  Status s = e.handles().Wait(h.value(), std::chrono::duration<double>(seconds));
  Status released = e.handles().Release(h.value());
  if (!s.ok()) return s.ToString();
  return released.ok() ? "" : "release: " + released.ToString();
}

std::vector<int> Members(int size, int parity) {
  std::vector<int> m;
  for (int r = parity; r < size; r += 2) m.push_back(r);
  return m;
}

}  // namespace

TEST_CASE("process sets: even ranks on gloo, odd ranks on loopback, at 1, 2, 3, 4 and 7 ranks") {
  for (int size : {1, 2, 3, 4, 7}) {
    auto errors = RunRanks(size, [size](int rank, Engine& e) -> std::string {
      std::vector<int> even = Members(size, 0), odd = Members(size, 1);
      auto a = e.AddProcessSet(even, "gloo");
      if (size == 1) {  // the set of the only rank is the global set
        return Check(a.status().code() == Code::kAlreadyExists, "size 1: " + a.status().ToString());
      }
      if (!a.ok()) return "add even: " + a.status().ToString();
      int32_t b = -1;
      if (!odd.empty()) {
        auto added = e.AddProcessSet(odd, "loopback");
        if (!added.ok()) return "add odd: " + added.status().ToString();
        b = added.value();
      }
      const std::vector<int>& mine = rank % 2 == 0 ? even : odd;
      const int32_t set = rank % 2 == 0 ? a.value() : b;
      auto info = e.ProcessSet(set);
      if (!info.ok() || info.value().rank != rank / 2) return "set rank of " + std::to_string(set);
      if (info.value().cpu_backend != (rank % 2 == 0 ? "gloo" : "loopback")) {
        return "backend " + info.value().cpu_backend;
      }
      float want = 0;
      for (int m : mine) want += m + 1;
      // Several tensors per set (fused and asynchronous on loopback), the same names in both.
      std::vector<std::vector<float>> bufs(6);
      std::vector<int64_t> handles;
      for (int i = 0; i < 6; ++i) {
        bufs[i].assign(100 + i * 300, static_cast<float>(rank + 1));
        auto h = Allreduce(e, "t" + std::to_string(i), &bufs[i], ReduceOp::kSum, set);
        if (!h.ok()) return h.status().ToString();
        handles.push_back(h.value());
      }
      for (int i = 0; i < 6; ++i) {
        Status s = e.handles().Wait(handles[i], std::chrono::seconds(30));
        Status released = e.handles().Release(handles[i]);
        if (!s.ok()) return "t" + std::to_string(i) + ": " + s.ToString();
        if (!released.ok()) return "t" + std::to_string(i) + " release: " + released.ToString();
        for (float v : bufs[i]) {
          if (v != want) return "t" + std::to_string(i) + " = " + std::to_string(v);
        }
      }
      std::string w = Wait(e, e.EnqueueBarrier(set));
      if (!w.empty()) return "barrier: " + w;
      // Everyone removes both sets, in the same order.
      Status s = e.RemoveProcessSet(a.value());
      if (!s.ok()) return "remove even: " + s.ToString();
      if (b >= 0 && !(s = e.RemoveProcessSet(b)).ok()) return "remove odd: " + s.ToString();
      if (e.ProcessSet(set).ok()) return "the set still exists after removal";
      return "";
    });
    INFO("size " << size);
    REQUIRE(Joined(errors) == "");
  }
}

TEST_CASE("process sets: a set waiting for a slow member does not hold up another set") {
  std::atomic<bool> b_done{false};
  auto errors = RunRanks(3, [&](int rank, Engine& e) -> std::string {
    auto a = e.AddProcessSet({0, 1}, "");
    auto b = e.AddProcessSet({0, 2}, "");
    if (!a.ok() || !b.ok()) return "add failed";
    std::vector<float> x(10, 1.0f), y(10, 1.0f);
    if (rank == 0) {
      auto ha = Allreduce(e, "slow", &x, ReduceOp::kSum, a.value());
      auto hb = Allreduce(e, "fast", &y, ReduceOp::kSum, b.value());
      if (!ha.ok() || !hb.ok()) return "enqueue";
      Status sb = e.handles().Wait(hb.value(), std::chrono::seconds(30));
      bool a_done = false;
      if (Status p = e.handles().Poll(ha.value(), &a_done); !p.ok()) return "poll: " + p.ToString();
      b_done = true;
      std::string w = Wait(e, ha.value());
      Status released = e.handles().Release(hb.value());
      if (!w.empty()) return "slow: " + w;
      if (!released.ok()) return "release fast: " + released.ToString();
      if (!sb.ok()) return "fast: " + sb.ToString();
      if (a_done) return "the slow set finished before its member submitted";
      return Check(x[0] == 2 && y[0] == 2, "values");
    }
    if (rank == 1) {  // submits only after set b finished on rank 0
      for (int i = 0; i < 3000 && !b_done; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (!b_done) return "set b never finished";
      return Wait(e, Allreduce(e, "slow", &x, ReduceOp::kSum, a.value()));
    }
    return Wait(e, Allreduce(e, "fast", &y, ReduceOp::kSum, b.value()));
  });
  REQUIRE(Joined(errors) == "");
}

TEST_CASE("process sets: bad use fails with an error naming what was wrong, and the job goes on") {
  auto errors = RunRanks(3, [](int rank, Engine& e) -> std::string {
    // Created differently on rank 1: every rank fails, naming the ranks and what they asked.
    std::vector<int> ranks = rank == 1 ? std::vector<int>{0, 1} : std::vector<int>{0, 2};
    auto bad = e.AddProcessSet(ranks, "");
    if (bad.ok()) return "a set created differently was accepted";
    const std::string& m = bad.status().message();
    if (m.find("differs across ranks") == std::string::npos ||
        m.find("[0,1] on rank 1") == std::string::npos ||
        m.find("[0,2] on ranks 0,2") == std::string::npos) {
      return "message: " + m;
    }
    // A rank refusing (a rank out of range on rank 2 only): everyone hears why at once.
    std::vector<int> odd = rank == 2 ? std::vector<int>{0, 7} : std::vector<int>{0, 1};
    auto refused = e.AddProcessSet(odd, "");
    if (refused.ok() || refused.status().message().find("refused by rank 2") == std::string::npos) {
      return "refusal: " + refused.status().ToString();
    }
    auto dup = e.AddProcessSet({0, 1, 2}, "");
    if (dup.status().code() != Code::kAlreadyExists)
      return "duplicate of global: " + dup.status().ToString();
    auto unknown = e.AddProcessSet({0, 1}, "no-such-backend");
    if (unknown.ok() || unknown.status().message().find("no-such-backend") == std::string::npos) {
      return "unknown backend: " + unknown.status().ToString();
    }
    if (e.RemoveProcessSet(kGlobalProcessSet).ok()) return "removed the global set";
    // Still in step: a good set works.
    auto good = e.AddProcessSet({0, 2}, "");
    if (!good.ok()) return "good set: " + good.status().ToString();
    std::vector<float> x(4, 1.0f);
    auto h = Allreduce(e, "x", &x, ReduceOp::kSum, good.value());
    if (rank == 1) {
      if (h.ok()) return "a non-member's submission was accepted";
      const std::string& nm = h.status().message();
      if (nm.find("not a member of process set " + std::to_string(good.value())) ==
          std::string::npos) {
        return "non-member message: " + nm;
      }
      auto none = Allreduce(e, "x", &x, ReduceOp::kSum, 99);
      if (none.ok() ||
          none.status().message().find("process set 99 does not exist") == std::string::npos) {
        return "unknown set: " + none.status().ToString();
      }
      return "";
    }
    std::string w = Wait(e, h);
    return w + Check(x[0] == 2, "value " + std::to_string(x[0]));
  });
  REQUIRE(Joined(errors) == "");
}

TEST_CASE("send/recv: a ring through every rank with tags out of order, at 2, 3, 4 and 7 ranks") {
  for (int size : {2, 3, 4, 7}) {
    auto errors = RunRanks(size, [size](int rank, Engine& e) -> std::string {
      const int next = (rank + 1) % size, prev = (rank + size - 1) % size;
      TensorSpec spec;
      spec.dtype = DataType::kInt32;
      spec.shape = {1000};
      std::vector<int32_t> out1(1000), out2(1000), in1(1000, -1), in2(1000, -1);
      for (int i = 0; i < 1000; ++i) {
        out1[i] = rank * 100000 + i;
        out2[i] = -(rank * 100000 + i);
      }
      // The receiver posts tag 2 first, the sender sends tag 1 first: tags match, not order.
      auto r2 = e.EnqueueRecv(spec, in2.data(), prev, 2);
      auto s1 = e.EnqueueSend(spec, out1.data(), next, 1);
      auto r1 = e.EnqueueRecv(spec, in1.data(), prev, 1);
      auto s2 = e.EnqueueSend(spec, out2.data(), next, 2);
      std::string w = Wait(e, r2) + Wait(e, s1) + Wait(e, r1) + Wait(e, s2);
      if (!w.empty()) return w;
      for (int i = 0; i < 1000; ++i) {
        if (in1[i] != prev * 100000 + i || in2[i] != -(prev * 100000 + i)) {
          return "element " + std::to_string(i) + ": " + std::to_string(in1[i]) + ", " +
                 std::to_string(in2[i]);
        }
      }
      // A size mismatch fails both sides with MISMATCH; a bad peer is refused at once.
      TensorSpec small = spec;
      small.shape = {999};
      auto bad = rank == 0   ? e.EnqueueSend(spec, out1.data(), 1, 9)
                 : rank == 1 ? e.EnqueueRecv(small, in1.data(), 0, 9)
                             : StatusOr<int64_t>(int64_t{0});
      if (rank < 2) {
        if (!bad.ok()) return "mismatch enqueue: " + bad.status().ToString();
        Status s = e.handles().Wait(bad.value(), std::chrono::seconds(30));
        if (Status r = e.handles().Release(bad.value()); !r.ok()) return "release: " + r.ToString();
        if (s.code() != Code::kMismatch || s.message().find("size differs") == std::string::npos) {
          return "mismatch: " + s.ToString();
        }
      }
      auto self = e.EnqueueSend(spec, out1.data(), rank, 0);
      if (self.ok() || self.status().message().find("peer") == std::string::npos)
        return "self send accepted";
      return "";
    });
    INFO("size " << size);
    REQUIRE(Joined(errors) == "");
  }
}

TEST_CASE("many small tensors at once: plans larger than the message limit go out in pieces") {
  // 3000 inline allreduces submitted as fast as possible with a 64 KiB message limit: one Poll
  // emits far more than 64 KiB of plans (results travel inline), which must not drop a session.
  auto errors = RunRanks(
      3,
      [](int rank, Engine& e) -> std::string {
        const int kN = 3000;
        std::vector<std::vector<float>> bufs(kN,
                                             std::vector<float>(64, static_cast<float>(rank + 1)));
        std::vector<int64_t> handles;
        for (int i = 0; i < kN; ++i) {
          auto h = Allreduce(e, "small." + std::to_string(i), &bufs[i], ReduceOp::kSum);
          if (!h.ok()) return "enqueue " + std::to_string(i) + ": " + h.status().ToString();
          handles.push_back(h.value());
        }
        for (int i = 0; i < kN; ++i) {
          Status s = e.handles().Wait(handles[i], std::chrono::seconds(60));
          Status released = e.handles().Release(handles[i]);
          if (!s.ok()) return "tensor " + std::to_string(i) + ": " + s.ToString();
          if (!released.ok())
            return "tensor " + std::to_string(i) + " release: " + released.ToString();
          if (bufs[i][0] != 6.0f)
            return "tensor " + std::to_string(i) + " = " + std::to_string(bufs[i][0]);
        }
        return Check(e.AsyncError().ok(), "job error: " + e.AsyncError().ToString());
      },
      [](Options* o) {
        o->max_message_bytes = 65536;
        o->fusion_threshold_bytes = 1 << 20;
      });
  REQUIRE(Joined(errors) == "");
}
