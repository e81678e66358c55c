// Faults on the shm communicator: a peer that never arrives (at creation and in a
// collective), Abort() waking a blocked waiter, a peer process that dies, a peer that
// destroys its communicator, and the segment never outliving its communicators (also when
// creation fails; stale names of dead creators are cleaned). Every test asserts the error
// and its text, never a time: the timeouts are long where only the fault's own mechanism can
// produce the expected error in time.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "collectives/registry.h"
#include "collectives/shm/shm_communicator.h"
#include "tests/collectives/shm_file_store.h"
#include "tests/collectives/shm_test_util.h"

using namespace hora;
using hora::testing::FileStore;
using hora::testing::JoinFailures;
using hora::testing::ProcessTag;
using hora::testing::RunShmRanks;
using hora::testing::SegmentTag;
using hora::testing::ShmEntries;
using hora::testing::UniquePrefix;

namespace {

constexpr auto kShort = std::chrono::milliseconds(1000);
constexpr auto kLong = std::chrono::milliseconds(60000);

bool Has(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

ShmConfig Config(int rank, int size, KvStore* store, const std::string& prefix,
                 std::chrono::milliseconds timeout) {
  ShmConfig c;
  c.rank = rank;
  c.size = size;
  c.store = store;
  c.key_prefix = prefix;
  c.timeout = timeout;
  return c;
}

std::string MakeTempDir() {
  char tmpl[] = "/tmp/hora-shm-test-XXXXXX";
  const char* d = mkdtemp(tmpl);
  return d ? d : "/tmp";
}

}  // namespace

TEST_CASE("shm fault: a member that never attaches -> DEADLINE_EXCEEDED naming it, no segment left",
          "[shm][fault]") {
  MemoryStore store;
  const std::string prefix = UniquePrefix("noattach");
  ShmConfig c = Config(0, 3, &store, prefix, kShort);
  auto comm = CreateShmCommunicator(c);  // ranks 1 and 2 never come
  REQUIRE_FALSE(comm.ok());
  CHECK(comm.status().code() == Code::kDeadlineExceeded);
  CHECK(Has(comm.status(), "missing ranks: 1, 2"));
  CHECK(ShmEntries(SegmentTag(prefix)).empty());
  CHECK(store.size() == 0);  // the name record is gone too

  c.rank = 1;  // a member whose rank 0 never publishes
  auto late = CreateShmCommunicator(c);
  REQUIRE_FALSE(late.ok());
  CHECK(late.status().code() == Code::kDeadlineExceeded);
  CHECK(Has(late.status(), "rank 0's segment name"));
}

TEST_CASE(
    "shm fault: a peer that never calls the collective -> DEADLINE_EXCEEDED naming it; "
    "the others and the late one fail at once after",
    "[shm][fault]") {
  std::atomic<int> gave_up{0};
  std::vector<Status> first(3), later(3);
  auto run = RunShmRanks(
      3,
      [&](Communicator& comm) -> std::string {
        std::vector<float> buf(1 << 18, 1.0f);
        if (comm.rank() == 2) {
          while (gave_up.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          first[2] = comm.Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
          return "";
        }
        first[comm.rank()] =
            comm.Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
        gave_up.fetch_add(1);
        later[comm.rank()] = comm.Barrier();
        return "";
      },
      nullptr, kShort);
  REQUIRE(JoinFailures(run.failures) == "");
  // One of ranks 0 and 1 timed out waiting for rank 2; the other either timed out too or
  // learnt of the first's failure through the segment.
  int timeouts = 0;
  for (int r = 0; r < 2; ++r) {
    INFO(first[r].ToString());
    if (first[r].code() == Code::kDeadlineExceeded) {
      ++timeouts;
      CHECK(Has(first[r], "waited 1000 ms for rank 2"));
    } else {
      CHECK(first[r].code() == Code::kPeerFailure);
      CHECK(Has(first[r], "waited 1000 ms for rank 2"));
    }
    CHECK(later[r].code() == first[r].code());  // sticky
    CHECK(later[r].message() == first[r].message());
  }
  CHECK(timeouts >= 1);
  INFO(first[2].ToString());
  CHECK(first[2].code() == Code::kPeerFailure);  // the late rank finds the segment broken
  CHECK(Has(first[2], "waited 1000 ms for rank 2"));
  CHECK(run.left_in_dev_shm.empty());
}

TEST_CASE("shm fault: Abort wakes a member blocked in a collective and in a recv", "[shm][fault]") {
  const int blocked_in = GENERATE(0, 1, 2);  // allreduce, recv, send on a full ring
  CAPTURE(blocked_in);
  std::atomic<Communicator*> target{nullptr};
  std::atomic<bool> released{false};
  std::atomic<bool> abort_returned{false};  // rank 0's communicator outlives the Abort call
  Status got, peer_got;
  // The aborting thread: once rank 0 exists, give it a moment to block (not required for
  // correctness: an abort before the call fails the call just the same), then abort.
  std::thread aborter([&] {
    while (target.load() == nullptr && !released.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (Communicator* c = target.load()) c->Abort(PeerFailure("the coordinator lost rank 7"));
    abort_returned.store(true);
  });
  auto run = RunShmRanks(
      2,
      [&](Communicator& comm) -> std::string {
        if (comm.rank() == 1) {
          // Never joins rank 0's operation; waits until rank 0 was aborted, then sees the
          // segment broken with rank 0's reason.
          while (!released.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
          peer_got = comm.Barrier();
          return "";
        }
        target.store(&comm);
        std::vector<uint8_t> buf(4 << 20, 1);
        if (blocked_in == 0) {
          got = comm.Allreduce(buf.data(), buf.size(), DataType::kUint8, ReduceOp::kSum);
        } else if (blocked_in == 1) {
          got = comm.Recv(buf.data(), buf.size(), 1, 3);
        } else {
          got = comm.Send(buf.data(), buf.size(), 1, 3);  // 4 MiB into a 256 KiB ring
        }
        // The operation fails as soon as Abort marks the segment broken, while Abort may still
        // run (it logs); returning would destroy `comm` under it (ThreadSanitizer saw that).
        while (!abort_returned.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        released.store(true);
        return "";
      },
      nullptr, kLong);
  aborter.join();
  REQUIRE(JoinFailures(run.failures) == "");
  INFO(got.ToString());
  CHECK(got.code() == Code::kPeerFailure);
  CHECK(got.message() == "the coordinator lost rank 7");
  INFO(peer_got.ToString());
  CHECK(peer_got.code() == Code::kPeerFailure);
  CHECK(Has(peer_got, "rank 0 of this set failed"));
  CHECK(Has(peer_got, "the coordinator lost rank 7"));
}

TEST_CASE("shm fault: a peer process that dies -> PEER_FAILURE naming it, long before the timeout",
          "[shm][fault]") {
  const std::string dir = MakeTempDir();
  const std::string prefix = UniquePrefix("dead");
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // Rank 1: attach, take part in one barrier, then die without any cleanup.
    FileStore store(dir);
    auto comm = CreateShmCommunicator(Config(1, 2, &store, prefix, kLong));
    if (comm.ok() && comm.value()->Barrier().ok()) raise(SIGKILL);
    _exit(3);
  }
  FileStore store(dir);
  // A long timeout: only the dead-process check can end the wait with PEER_FAILURE.
  const ShmConfig c = Config(0, 2, &store, prefix, kLong);
  Status barrier, allreduce, again;
  {
    auto comm = CreateShmCommunicator(c);
    REQUIRE(comm.ok());
    barrier = comm.value()->Barrier();
    std::vector<float> buf(1 << 20, 1.0f);
    allreduce = comm.value()->Allreduce(buf.data(), buf.size(), DataType::kFloat32, ReduceOp::kSum);
    again = comm.value()->Barrier();
  }
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  CHECK(WIFSIGNALED(wstatus));
  CHECK(barrier.ok());
  INFO(allreduce.ToString());
  CHECK(allreduce.code() == Code::kPeerFailure);
  CHECK(Has(allreduce, "rank 1 (pid " + std::to_string(child) + ") is gone"));
  CHECK(again.message() == allreduce.message());
  CHECK(ShmEntries(SegmentTag(prefix)).empty());
  std::system(("rm -rf " + dir).c_str());
}

TEST_CASE("shm fault: a peer that destroyed its communicator -> PEER_FAILURE naming it",
          "[shm][fault]") {
  std::atomic<bool> gone{false};
  Status got;
  auto run = RunShmRanks(
      2,
      [&](Communicator& comm) -> std::string {
        RANK_OK(comm.Barrier());
        if (comm.rank() == 1) {
          gone.store(true);
          return "";  // its communicator is destroyed when this returns
        }
        while (!gone.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        got = comm.Barrier();
        return "";
      },
      nullptr, kLong);
  REQUIRE(JoinFailures(run.failures) == "");
  INFO(got.ToString());
  CHECK(got.code() == Code::kPeerFailure);
  CHECK(Has(got, "rank 1 (pid"));
  CHECK(Has(got, "destroyed its communicator"));
}

TEST_CASE("shm segment: named only while members attach, gone after destruction", "[shm]") {
  const int size = GENERATE(1, 2, 4);
  CAPTURE(size);
  std::vector<std::string> during;
  std::string tag;
  auto run = RunShmRanks(size, [&](Communicator& comm) -> std::string {
    RANK_OK(comm.Barrier());
    if (comm.rank() == 0)
      during = ShmEntries(".shmtest-run-" + ProcessTag());  // every member attached
    RANK_OK(comm.Barrier());
    return "";
  });
  REQUIRE(JoinFailures(run.failures) == "");
  CHECK(during.empty());
  CHECK(run.left_in_dev_shm.empty());
}

TEST_CASE("shm segment: names left by dead creators are removed, live ones kept", "[shm]") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);  // a pid that is gone
  const std::string dead = "/hora-shm." + std::to_string(child) + ".stale.0";
  const std::string live = "/hora-shm." + std::to_string(getpid()) + ".live.0";
  for (const std::string& n : {dead, live}) {
    int fd = shm_open(n.c_str(), O_CREAT | O_RDWR, 0600);
    REQUIRE(fd >= 0);
    close(fd);
  }
  CHECK(CleanStaleShmSegments() >= 1);
  CHECK(ShmEntries(dead.substr(1)).empty());
  CHECK(ShmEntries(live.substr(1)).size() == 1);
  shm_unlink(live.c_str());
}

TEST_CASE("shm registry: named, it serves one host and refuses several with the reason", "[shm]") {
  REQUIRE(IsBackendBuilt("shm"));
  MemoryStore store;
  BackendConfig c;
  c.global_ranks = {0, 1};
  c.hostnames = {"a", "b"};
  c.store = &store;
  c.key_prefix = UniquePrefix("registry");
  auto refused = CreateCommunicator("shm", "HORA_CPU_OPERATIONS", c);
  REQUIRE_FALSE(refused.ok());
  INFO(refused.status().ToString());
  CHECK(Has(refused.status(), "one host"));
  CHECK(Has(refused.status(), "2 hosts (a, b)"));

  c.hostnames = {"h", "h"};
  std::vector<Status> made(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      BackendConfig mine = c;
      mine.rank = r;
      auto comm = CreateCommunicator("shm", "HORA_CPU_OPERATIONS", mine);
      if (!comm.ok()) {
        made[r] = comm.status();
        return;
      }
      if (std::string(comm.value()->name()) != "shm") made[r] = Internal("wrong backend");
      int32_t x = r + 1;
      Status s = comm.value()->Allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum);
      if (!s.ok() || x != 3) made[r] = Internal("allreduce through the registry: " + s.ToString());
    });
  }
  for (auto& t : threads) t.join();
  CHECK(made[0].ToString() == "OK");
  CHECK(made[1].ToString() == "OK");
}

TEST_CASE("shm wait: a member waiting for a late peer sleeps in the kernel, not spinning",
          "[shm]") {
  std::atomic<pid_t> waiter_tid{0};
  std::atomic<bool> seen_sleeping{false};
  std::atomic<bool> done{false};
  // Watches the waiting thread's state in /proc until it is seen asleep ('S') or the barrier
  // completed; the late rank joins only after that (or after 20 s, and the test fails).
  std::thread watcher([&] {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!done.load() && !seen_sleeping.load() && std::chrono::steady_clock::now() < give_up) {
      const pid_t tid = waiter_tid.load();
      if (tid != 0) {
        char path[64];
        std::snprintf(path, sizeof(path), "/proc/self/task/%d/stat", static_cast<int>(tid));
        if (FILE* f = std::fopen(path, "r")) {
          char buf[512];
          const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
          std::fclose(f);
          buf[n] = 0;
          const char* p = std::strrchr(buf, ')');
          if (p != nullptr && p[1] == ' ' && p[2] == 'S') seen_sleeping.store(true);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    done.store(true);
  });
  auto run = RunShmRanks(
      2,
      [&](Communicator& comm) -> std::string {
        if (comm.rank() == 1) {
          while (!done.load() && !seen_sleeping.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
          }
        } else {
          waiter_tid.store(static_cast<pid_t>(syscall(SYS_gettid)));
        }
        RANK_OK(comm.Barrier());
        done.store(true);
        return "";
      },
      nullptr, kLong);
  watcher.join();
  REQUIRE(JoinFailures(run.failures) == "");
  CHECK(seen_sleeping.load());
}
