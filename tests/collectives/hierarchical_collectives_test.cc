// The hierarchical backend's other collectives (on its flat communicator) and its failures,
// members as threads with fake hostnames (hier_ranks.h): broadcast from every root,
// allgatherv and alltoallv with uneven sizes, reducescatter over every dtype and op with
// uneven counts, barrier, send/recv across and inside hosts; Abort ending a blocked receive,
// and an Abort in the middle of the members' allreduces: every member fails within the hang
// bound, with the reason or the phase and inner backend that failed, and stays failed.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "collectives/hierarchical/hierarchical_communicator.h"
#include "tests/collectives/dtype_values.h"
#include "tests/collectives/hier_ranks.h"
#include "tests/harness/hang_bound.h"

using namespace hora;
using namespace hora::testing;

namespace {

// Rank r's byte i of an allgatherv / alltoallv contribution toward `to`.
uint8_t Byte(int r, int to, size_t i) { return static_cast<uint8_t>(r * 31 + to * 7 + i); }

std::string Collectives(Communicator& comm) {
  const int n = comm.size(), me = comm.rank();
  for (int root = 0; root < n; ++root) {
    std::vector<uint8_t> b(1003, me == root ? 7 + root : 0), want(1003, 7 + root);
    RANK_OK(comm.Broadcast(b.data(), b.size(), root));
    RANK_EXPECT(
        CompareBytes(b.data(), want.data(), b.size(), "broadcast root " + std::to_string(root)));
  }
  std::vector<size_t> sizes(n);
  size_t total = 0;
  for (int r = 0; r < n; ++r) total += sizes[r] = (r * 37) % 101;  // rank 0 sends nothing
  std::vector<uint8_t> in(sizes[me]), out(total), want;
  for (size_t i = 0; i < in.size(); ++i) in[i] = Byte(me, 0, i);
  for (int r = 0; r < n; ++r) {
    for (size_t i = 0; i < sizes[r]; ++i) want.push_back(Byte(r, 0, i));
  }
  RANK_OK(comm.Allgatherv(in.data(), out.data(), sizes));
  RANK_EXPECT(CompareBytes(out.data(), want.data(), total, "allgatherv"));
  // alltoallv: r sends (r + to) % 5 * 11 bytes to `to`.
  auto amount = [](int from, int to) { return static_cast<size_t>((from + to) % 5 * 11); };
  std::vector<size_t> send(n), recv(n);
  std::vector<uint8_t> sbuf, rwant;
  for (int to = 0; to < n; ++to) {
    send[to] = amount(me, to);
    recv[to] = amount(to, me);
    for (size_t i = 0; i < send[to]; ++i) sbuf.push_back(Byte(me, to, i));
    for (size_t i = 0; i < recv[to]; ++i) rwant.push_back(Byte(to, me, i));
  }
  std::vector<uint8_t> rbuf(rwant.size());
  RANK_OK(comm.Alltoallv(sbuf.data(), send, rbuf.data(), recv));
  RANK_EXPECT(CompareBytes(rbuf.data(), rwant.data(), rwant.size(), "alltoallv"));
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      std::vector<size_t> counts(n);
      size_t sum = 0, offset = 0;
      for (int r = 0; r < n; ++r) {
        counts[r] = (r * 13 + 3) % 17;
        if (r < me) offset += counts[r];
        sum += counts[r];
      }
      const size_t es = DataTypeSize(t);
      std::vector<uint8_t> rin(sum * es), rout(counts[me] * es + 1), rwant2(counts[me] * es + 1);
      FillInput(t, op, me, rin.data(), sum);
      FillExpected(t, op, n, rwant2.data(), counts[me], offset);
      rout.back() = rwant2.back() = 0x5A;
      RANK_OK(comm.Reducescatter(rin.data(), rout.data(), counts, t, op));
      RANK_EXPECT(CompareBytes(rout.data(), rwant2.data(), rout.size(),
                               Label("reducescatter", t, op, sum)));
    }
  }
  RANK_OK(comm.Barrier());
  // A ring over set ranks: with host-major layouts it crosses hosts and stays inside them.
  std::vector<int64_t> msg(300, me), got(300, -1);
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  if (me % 2 == 0) {
    RANK_OK(comm.Send(msg.data(), msg.size() * 8, next, 9));
    RANK_OK(comm.Recv(got.data(), got.size() * 8, prev, 9));
  } else {
    RANK_OK(comm.Recv(got.data(), got.size() * 8, prev, 9));
    RANK_OK(comm.Send(msg.data(), msg.size() * 8, next, 9));
  }
  for (int64_t v : got) {
    if (v != prev) return "ring: got " + std::to_string(v) + " from rank " + std::to_string(prev);
  }
  return "";
}

}  // namespace

TEST_CASE("hierarchical: broadcast, allgatherv, alltoallv, reducescatter, barrier, send/recv") {
  for (const auto& hosts : {Hosts(2, 2), Hosts(2, 3), Hosts(3, 2)}) {
    INFO("hosts x ranks " << hosts.size());
    REQUIRE(JoinFailures(RunHierRanks(hosts, Collectives)) == "");
  }
}

TEST_CASE("hierarchical: the postscale folded into the allreduce, bit for bit the pass after") {
  for (const auto& hosts : {Hosts(2, 2), Hosts(2, 3), Hosts(3, 2)}) {
    INFO("hosts x ranks " << hosts.size());
    REQUIRE(JoinFailures(RunHierRanks(hosts, [](Communicator& comm) -> std::string {
              RANK_EXPECT(comm.folds_postscale() ? "" : "hierarchical folds the postscale");
              for (DataType t : {DataType::kFloat16, DataType::kBfloat16, DataType::kFloat32,
                                 DataType::kFloat64}) {
                for (const Postscale& post : {Postscale{1.0, comm.size()}, Postscale{0.37, 1}}) {
                  const size_t count = 10007;
                  std::vector<uint8_t> want(count * DataTypeSize(t));
                  for (size_t i = 0; i < count; ++i) {
                    Put(t, want.data(), i, 0.1 * static_cast<double>((i * 7 + comm.rank()) % 97));
                  }
                  std::vector<uint8_t> got = want;
                  RANK_OK(comm.Allreduce(want.data(), count, t, ReduceOp::kSum));
                  ScaleInPlace(want.data(), count, t, post);
                  RANK_OK(comm.AllreduceScaled(got.data(), count, t, ReduceOp::kSum, post));
                  RANK_EXPECT(CompareBytes(got.data(), want.data(), got.size(),
                                           Label("allreduce scaled", t, ReduceOp::kSum, count)));
                }
              }
              return "";
            })) == "");
  }
}

TEST_CASE("hierarchical: Abort ends a receive whose sender never sends, and sticks") {
  std::atomic<Communicator*> receiver{nullptr};
  std::atomic<bool> done{false}, abort_returned{false};
  std::thread aborter([&] {
    while (receiver.load() == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    receiver.load()->Abort(PeerFailure("rank 3 (host h, pid 7) is lost: test"));
    abort_returned = true;
  });
  const auto timeout = std::chrono::milliseconds(5000);
  const auto start = std::chrono::steady_clock::now();
  auto failures = RunHierRanks(
      Hosts(2, 2),
      [&](Communicator& c) -> std::string {
        if (c.rank() != 0) {
          while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          return "";
        }
        std::vector<char> buf(64);
        receiver = &c;
        Status s = c.Recv(buf.data(), buf.size(), 3, 0);
        while (!abort_returned) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        Status later = c.Allreduce(buf.data(), 4, DataType::kInt8, ReduceOp::kSum);
        done = true;
        if (s.ok()) return "the receive succeeded";
        if (s.message().find("rank 3 (host h, pid 7) is lost: test") == std::string::npos) {
          return "the receive's error lacks the reason: " + s.ToString();
        }
        if (later.ok() || later.message() != s.message()) return "not sticky: " + later.ToString();
        return "";
      },
      "hierarchical", timeout);
  aborter.join();
  REQUIRE(JoinFailures(failures) == "");
  REQUIRE(std::chrono::steady_clock::now() - start < HangBound(timeout));
}

TEST_CASE(
    "hierarchical: one member aborts while the others allreduce; every member fails, naming why") {
  const auto timeout = std::chrono::milliseconds(3000);
  const std::string reason = "rank 0 was told to stop: test";
  std::vector<std::string> errors(4);
  const auto start = std::chrono::steady_clock::now();
  auto failures = RunHierRanks(
      Hosts(2, 2),
      [&](Communicator& c) -> std::string {
        std::vector<float> x(100000, 1.0f);
        if (c.rank() == 0) c.Abort(Aborted(reason));
        Status s = c.Allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
        Status again = c.Barrier();
        if (s.ok()) return "the allreduce succeeded";
        if (again.message() != s.message()) return "not sticky: " + again.ToString();
        errors[c.rank()] = s.message();
        return "";
      },
      "hierarchical", timeout);
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(JoinFailures(failures) == "");
  INFO("errors: " << errors[0] << "\n" << errors[1] << "\n" << errors[2] << "\n" << errors[3]);
  REQUIRE(errors[0] == reason);
  // Rank 1 shares rank 0's host: its shm reducescatter sees rank 0's abort.
  REQUIRE(errors[1].find("hierarchical allreduce, host-local reducescatter") != std::string::npos);
  REQUIRE(errors[1].find("(shm)") != std::string::npos);
  // Ranks 2 and 3 finish their host's step and fail in the cross-host allreduce with 0 or 1.
  for (int r : {2, 3}) {
    REQUIRE(errors[r].find("hierarchical allreduce, cross-host allreduce") != std::string::npos);
    REQUIRE(errors[r].find("(tcp)") != std::string::npos);
  }
  REQUIRE(took < HangBound(timeout));
}

TEST_CASE(
    "hierarchical: a member aborted during chunked allreduces; every member fails in "
    "bound, the others naming the chunk and phase") {
  const auto timeout = std::chrono::milliseconds(3000);
  const std::string reason = "rank 0 was told to stop: test";
  std::vector<std::string> errors(4);
  std::atomic<Communicator*> first{nullptr};
  std::atomic<bool> abort_returned{false};
  std::thread aborter([&] {
    while (first.load() == nullptr) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    first.load()->Abort(Aborted(reason));
    abort_returned = true;
  });
  const auto start = std::chrono::steady_clock::now();
  auto failures = RunHierRanks(
      Hosts(2, 2),
      [&](Communicator& c) -> std::string {
        if (c.rank() == 0) first = &c;
        // 4 MiB in 16 KiB chunks, over and over until the abort ends it.
        std::vector<float> x(1 << 20, 1.0f);
        Status s;
        for (int i = 0; i < 1000 && s.ok(); ++i) {
          s = c.Allreduce(x.data(), x.size(), DataType::kFloat32, ReduceOp::kSum);
        }
        // Rank 0's communicator lives until Abort has returned.
        while (c.rank() == 0 && !abort_returned) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        if (s.ok()) return "1000 allreduces and no abort";
        errors[c.rank()] = s.message();
        return "";
      },
      "hierarchical", timeout,
      [](BackendConfig* c) {
        c->env = [](const char* name) -> const char* {
          return std::string(name) == kEnvHierarchicalChunkBytes ? "16384" : nullptr;
        };
      });
  aborter.join();
  const auto took = std::chrono::steady_clock::now() - start;
  REQUIRE(JoinFailures(failures) == "");
  INFO("errors: " << errors[0] << "\n" << errors[1] << "\n" << errors[2] << "\n" << errors[3]);
  REQUIRE(errors[0] == reason);
  for (int r : {1, 2, 3}) {
    REQUIRE(errors[r].find("hierarchical allreduce, ") != std::string::npos);
    REQUIRE(errors[r].find(" of chunk ") != std::string::npos);
    REQUIRE(errors[r].find(" of 256 (") != std::string::npos);
  }
  REQUIRE(took < HangBound(timeout));
}
