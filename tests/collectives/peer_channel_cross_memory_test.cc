// The point-to-point channel's cross-memory transfers between processes of one host
// (collectives/peer_channel.h), processes as channels of one process: a large message is read
// from the sender's memory, parked until its recv, refused, mismatched; a sender that died or
// whose send failed meanwhile is not taken for a message; between hosts, or turned off, the
// socket.
#include <sys/mman.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/collectives/peer_channel_harness.h"

namespace hora {
namespace testing {
namespace {

// Sends `a` from rank 0 to rank 1 `rounds` times (the recv first on odd rounds), each whole.
void Rounds(const std::vector<std::unique_ptr<PeerChannel>>& ch, const std::vector<float>& a,
            int rounds, int64_t first_seq) {
  for (int i = 0; i < rounds; ++i) {
    std::vector<float> got(a.size(), -1);
    Pending s, r;
    const Key key{0, 5, first_seq + i};
    if (i % 2) ch[1]->Recv(0, key, Floats(a.size()), got.data(), "recv", r.done());
    ch[0]->Send(1, key, Floats(a.size()), a.data(), "send", s.done());
    if (i % 2 == 0) ch[1]->Recv(0, key, Floats(a.size()), got.data(), "recv", r.done());
    REQUIRE(r.Get().ok());
    REQUIRE(s.Get().ok());
    REQUIRE(got == a);
  }
}

TEST_CASE("on one host a large message is read from the sender's memory, every byte") {
  MemoryStore store;
  auto ch = Open(2, &store, {}, /*cross_memory=*/true);
  const std::vector<float> a = Filled(256 << 10, 3.0f);  // 1 MiB
  Rounds(ch, a, 2, 0);  // the first ones may go over the socket while the probe is answered
  for (int i = 0; i < 50 && ch[1]->cross_memory_reads() == 0; ++i) Rounds(ch, a, 1, 10 + i);
  REQUIRE(ch[1]->cross_memory_reads() > 0);
  const int64_t before = ch[1]->cross_memory_reads();
  Rounds(ch, a, 4, 100);
  CHECK(ch[1]->cross_memory_reads() == before + 4);
  Rounds(ch, Filled(1000, 1.0f), 2, 200);  // under cross_memory_bytes: the socket
  CHECK(ch[1]->cross_memory_reads() == before + 4);
  CHECK(ch[0]->cross_memory_reads() == 0);  // rank 0 received nothing

  // A message that comes before its recv waits in the sender's memory (the send pending)
  // and is read once the recv comes, straight into its output.
  std::vector<float> got(a.size(), -1);
  Pending s, r;
  ch[0]->Send(1, Key{0, 6, 0}, Floats(a.size()), a.data(), "send", s.done());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(ch[1]->cross_memory_reads() == before + 4);
  CHECK(s.future.wait_for(std::chrono::seconds(0)) != std::future_status::ready);
  ch[1]->Recv(0, Key{0, 6, 0}, Floats(a.size()), got.data(), "recv", r.done());
  REQUIRE(r.Get().ok());
  REQUIRE(s.Get().ok());
  CHECK(got == a);
  CHECK(ch[1]->cross_memory_reads() == before + 5);

  // A recv refused by this side fails the parked message's send with its reason.
  Pending s3;
  ch[0]->Send(1, Key{0, 8, 0}, Floats(a.size()), a.data(), "send", s3.done());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ch[1]->RefuseRecv(0, Key{0, 8, 0}, InvalidArgument("this recv was refused"));
  const Status refused = s3.Get();
  CHECK(refused.code() == Code::kInvalidArgument);
  CHECK(refused.message().find("this recv was refused") != std::string::npos);

  // A size that differs fails both sides; the next message is in step.
  std::vector<float> small(a.size() / 2);
  Pending s2, r2;
  ch[0]->Send(1, Key{0, 7, 0}, Floats(a.size()), a.data(), "send", s2.done());
  ch[1]->Recv(0, Key{0, 7, 0}, Floats(small.size()), small.data(), "recv", r2.done());
  CHECK(r2.Get().code() == Code::kMismatch);
  CHECK(s2.Get().code() == Code::kMismatch);
  Rounds(ch, a, 2, 300);
}

TEST_CASE("a parked message whose sender's memory is gone is the sender's death, after the grace") {
  // The sender's tensor unmapped while its message waits: the read fails as it would had the
  // sender died. The recv fails as for a connection that ended: after the grace, unless the
  // job's verdict (Abort) comes first.
  const bool verdict = GENERATE(false, true);
  MemoryStore store;
  // Rank 1 heard that rank 0 died (rank 0 may hear the same of rank 1 once its connection
  // is dropped).
  auto lost = std::make_shared<std::atomic<int>>(0);
  PeerChannel::Options o;
  o.on_lost = [lost](const Status& s) {
    if (s.message().find("rank 0 exited or died") == 0) ++*lost;
  };
  o.lost_grace = std::chrono::milliseconds(verdict ? 5000 : 300);
  auto ch = Open(2, &store, o, /*cross_memory=*/true);
  const std::vector<float> a = Filled(256 << 10, 2.0f);  // 1 MiB
  for (int i = 0; i < 50 && ch[1]->cross_memory_reads() == 0; ++i) Rounds(ch, a, 1, i);
  REQUIRE(ch[1]->cross_memory_reads() > 0);

  const size_t bytes = a.size() * sizeof(float);
  void* mapped = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mapped != MAP_FAILED);
  std::memcpy(mapped, a.data(), bytes);
  Pending s, r;
  ch[0]->Send(1, Key{0, 9, 0}, Floats(a.size()), mapped, "send", s.done());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // parked at rank 1
  REQUIRE(munmap(mapped, bytes) == 0);
  std::vector<float> got(a.size(), -1);
  const auto start = std::chrono::steady_clock::now();
  ch[1]->Recv(0, Key{0, 9, 0}, Floats(a.size()), got.data(), "recv", r.done());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(r.future.wait_for(std::chrono::seconds(0)) != std::future_status::ready);
  if (verdict) {
    ch[1]->Abort(PeerFailure("rank 7 is lost"));
    CHECK(r.Get().message() == "recv: rank 7 is lost");
    CHECK(*lost == 0);
    return;
  }
  const Status rs = r.Get();
  CHECK(std::chrono::steady_clock::now() - start >= std::chrono::milliseconds(300));
  CHECK(rs.code() == Code::kPeerFailure);
  CHECK(rs.message().find("recv: rank 0 exited or died: its point-to-point connection with rank 1 "
                          "ended (reading the tensor from its memory: ") == 0);
  CHECK(*lost == 1);
}

TEST_CASE("a parked message whose send failed is not received as complete") {
  // The sender's job failed (Abort) while its message waited: its send failed and its buffer
  // may be reused, so the recv must not take what it reads there as the message.
  MemoryStore store;
  PeerChannel::Options o;
  o.lost_grace = std::chrono::milliseconds(200);
  auto ch = Open(2, &store, o, /*cross_memory=*/true);
  const std::vector<float> a = Filled(256 << 10, 4.0f);  // 1 MiB
  for (int i = 0; i < 50 && ch[1]->cross_memory_reads() == 0; ++i) Rounds(ch, a, 1, i);
  REQUIRE(ch[1]->cross_memory_reads() > 0);
  const int64_t reads = ch[1]->cross_memory_reads();

  Pending s, r;
  ch[0]->Send(1, Key{0, 9, 0}, Floats(a.size()), a.data(), "send", s.done());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // parked at rank 1
  ch[0]->Abort(PeerFailure("rank 0's job failed"));
  CHECK(s.Get().message() == "send: rank 0's job failed");
  std::vector<float> got(a.size(), -1);
  ch[1]->Recv(0, Key{0, 9, 0}, Floats(a.size()), got.data(), "recv", r.done());
  const Status rs = r.Get();
  CHECK(rs.code() == Code::kPeerFailure);
  CHECK(rs.message().find("its send ended while the tensor was read") != std::string::npos);
  CHECK(ch[1]->cross_memory_reads() == reads);
}

TEST_CASE("between hosts, or turned off, every message goes over the socket") {
  const std::vector<float> a = Filled(256 << 10, 5.0f);
  SECTION("two hostnames") {
    MemoryStore store;
    auto ch = Open(2, &store, {}, /*cross_memory=*/true, {"host-a", "host-b"});
    Rounds(ch, a, 12, 0);
    CHECK(ch[1]->cross_memory_reads() == 0);
  }
  SECTION("cross_memory_bytes 0") {
    MemoryStore store;
    auto ch = Open(2, &store, {}, /*cross_memory=*/false);
    Rounds(ch, a, 12, 0);
    CHECK(ch[1]->cross_memory_reads() == 0);
  }
}

}  // namespace
}  // namespace testing
}  // namespace hora
