// The point-to-point channel (collectives/peer_channel.h), processes as channels of one
// process over real sockets: a message meets its recv in either order, large messages cross
// both ways at once, a recv posted mid-arrival gets every byte, a size or dtype that differs
// fails both sides, a refusal reaches the other side and the connection stays usable, a
// closed peer is named, stalls and Abort end what is pending. Cross-memory transfers:
// peer_channel_cross_memory_test.cc.
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/collectives/peer_channel_harness.h"

namespace hora {
namespace testing {
namespace {

TEST_CASE("a message meets its recv whichever comes first, by key, not by order") {
  MemoryStore store;
  auto ch = Open(2, &store);
  const auto a = Filled(1000, 1), b = Filled(1000, 5000);
  std::vector<float> got_a(1000, -1), got_b(1000, -1);
  // Key 2 is received before it is sent; key 1 is sent before its recv is posted.
  Pending r2, s1, s2, r1;
  ch[1]->Recv(0, Key{0, 7, 2}, Floats(1000), got_b.data(), "recv 2", r2.done());
  ch[0]->Send(1, Key{0, 7, 1}, Floats(1000), a.data(), "send 1", s1.done());
  ch[0]->Send(1, Key{0, 7, 2}, Floats(1000), b.data(), "send 2", s2.done());
  REQUIRE(r2.Get().ok());
  REQUIRE(got_b == b);
  ch[1]->Recv(0, Key{0, 7, 1}, Floats(1000), got_a.data(), "recv 1", r1.done());
  REQUIRE(r1.Get().ok());
  REQUIRE(got_a == a);
  REQUIRE(s1.Get().ok());  // a send completes once its recv took it
  REQUIRE(s2.Get().ok());
}

TEST_CASE("large messages cross both ways at once without blocking each other") {
  MemoryStore store;
  auto ch = Open(2, &store);
  const size_t n = 8 << 20;  // 32 MiB each way, far beyond the sockets' buffers
  const auto a = Filled(n, 0), b = Filled(n, 7);
  std::vector<float> at0(n), at1(n);
  Pending s0, s1, r0, r1;
  ch[0]->Send(1, Key{0, 0, 0}, Floats(n), a.data(), "send 0>1", s0.done());
  ch[1]->Send(0, Key{0, 0, 0}, Floats(n), b.data(), "send 1>0", s1.done());
  ch[0]->Recv(1, Key{0, 0, 0}, Floats(n), at0.data(), "recv at 0", r0.done());
  ch[1]->Recv(0, Key{0, 0, 0}, Floats(n), at1.data(), "recv at 1", r1.done());
  for (Pending* p : {&s0, &s1, &r0, &r1}) REQUIRE(p->Get().ok());
  REQUIRE(at0 == b);
  REQUIRE(at1 == a);
}

TEST_CASE("a recv posted at any point of its message's arrival gets every byte") {
  // Posted before, during (the rest of the body goes straight to the output) or after.
  MemoryStore store;
  auto ch = Open(2, &store);
  const size_t n = 1 << 20;  // 4 MiB
  for (int round = 0; round < 12; ++round) {
    const auto a = Filled(n, static_cast<float>(round));
    std::vector<float> got(n, -1);
    Pending s, r;
    ch[0]->Send(1, Key{0, 0, round}, Floats(n), a.data(), "send", s.done());
    std::this_thread::sleep_for(std::chrono::microseconds(200 * (round % 6)));
    ch[1]->Recv(0, Key{0, 0, round}, Floats(n), got.data(), "recv", r.done());
    REQUIRE(r.Get().ok());
    REQUIRE(s.Get().ok());
    INFO("round " << round);
    REQUIRE(got == a);
  }
}

TEST_CASE("a size or dtype that differs fails both sides; the connection stays in step") {
  MemoryStore store;
  auto ch = Open(2, &store);
  const auto a = Filled(100, 1);
  std::vector<float> got(100, -1);
  Pending s, r;
  ch[0]->Send(1, Key{0, 0, 0}, Floats(100), a.data(), "send #0", s.done());
  ch[1]->Recv(0, Key{0, 0, 0}, Floats(99), got.data(), "recv #0", r.done());
  Status rs = r.Get(), ss = s.Get();
  CHECK(rs.code() == Code::kMismatch);
  CHECK(ss.code() == Code::kMismatch);
  CHECK(rs.message().find("recv #0: the size differs: the sender sends 400 bytes (float32), "
                          "the recv takes 396 bytes (float32)") != std::string::npos);
  CHECK(ss.message().find("send #0: the receiver refused it") != std::string::npos);
  CHECK(ss.message().find("size differs") != std::string::npos);
  CHECK(got[0] == -1);  // nothing written
  // The recv first this time, with another dtype of the same size.
  Pending s2, r2;
  ch[1]->Recv(0, Key{0, 0, 1}, Meta{DataType::kInt32, 400}, got.data(), "recv #1", r2.done());
  ch[0]->Send(1, Key{0, 0, 1}, Floats(100), a.data(), "send #1", s2.done());
  CHECK(r2.Get().message().find("the dtype differs") != std::string::npos);
  CHECK(s2.Get().code() == Code::kMismatch);
  // The dropped bodies left the stream in step.
  Delivered(ch, 0, 1, Key{0, 0, 2}, a);
}

TEST_CASE("a refused side fails the other with its reason") {
  MemoryStore store;
  auto ch = Open(2, &store);
  const auto a = Filled(10, 1);
  std::vector<float> got(10, -1);
  Pending r;
  ch[1]->Recv(0, Key{3, 1, 0}, Floats(10), got.data(), "recv", r.done());
  ch[0]->SendRefusal(1, Key{3, 1, 0}, InvalidArgument("rank 0: the tensor has no data"));
  Status rs = r.Get();
  CHECK(rs.code() == Code::kInvalidArgument);
  CHECK(rs.message() == "recv: the sender refused it: rank 0: the tensor has no data");
  // A refused recv: the message that comes is dropped, its send fails with the reason.
  ch[1]->RefuseRecv(0, Key{3, 1, 1}, InvalidArgument("rank 1: no output"));
  Pending s;
  ch[0]->Send(1, Key{3, 1, 1}, Floats(10), a.data(), "send", s.done());
  Status ss = s.Get();
  CHECK(ss.code() == Code::kInvalidArgument);
  CHECK(ss.message() == "send: the receiver refused it: rank 1: no output");
  Delivered(ch, 0, 1, Key{3, 1, 2}, a);
}

TEST_CASE("a peer that closes is named by what was pending with it, and by later calls") {
  MemoryStore store;
  auto lost = std::make_shared<std::atomic<int>>(0);
  PeerChannel::Options o;
  o.on_lost = [lost](const Status&) { ++*lost; };
  auto ch = Open(3, &store, o);
  const auto a = Filled(10, 1);
  std::vector<float> got(10, -1);
  // Rank 0 has talked with rank 1 both ways; rank 2 has sent to 0 and is still there.
  Pending s, r, warm_s, warm_r;
  ch[1]->Send(0, Key{0, 0, 0}, Floats(10), a.data(), "warm", warm_s.done());
  ch[0]->Recv(1, Key{0, 0, 0}, Floats(10), got.data(), "warm", warm_r.done());
  REQUIRE(warm_r.Get().ok());
  REQUIRE(warm_s.Get().ok());
  ch[0]->Recv(1, Key{0, 0, 1}, Floats(10), got.data(), "recv from 1", r.done());
  ch[0]->Send(1, Key{0, 0, 0}, Floats(10), a.data(), "send to 1", s.done());
  ch[1].reset();  // closed, not dead: its goodbye comes before the end of its connections
  Status rs = r.Get(), ss = s.Get();
  CHECK(rs.code() == Code::kPeerFailure);
  CHECK(rs.message() == "recv from 1: rank 1 shut down with this transfer pending");
  CHECK(ss.code() == Code::kPeerFailure);
  CHECK(ss.message() == "send to 1: rank 1 shut down with this transfer pending");
  Pending later;
  ch[0]->Recv(1, Key{0, 0, 2}, Floats(10), got.data(), "later", later.done());
  CHECK(later.Get().code() == Code::kPeerFailure);
  // Rank 2 is unaffected.
  Pending s2, r2;
  ch[2]->Send(0, Key{0, 0, 0}, Floats(10), a.data(), "from 2", s2.done());
  ch[0]->Recv(2, Key{0, 0, 0}, Floats(10), got.data(), "at 0", r2.done());
  REQUIRE(r2.Get().ok());
  REQUIRE(s2.Get().ok());
  CHECK(*lost == 0);  // a shutdown is no death

  // A peer whose job failed says after which error it shut down.
  Pending r3;
  ch[0]->Recv(2, Key{0, 0, 1}, Floats(10), got.data(), "recv from 2", r3.done());
  ch[2]->Abort(PeerFailure("rank 5 (host h, pid 9) exited or died"));
  ch[2].reset();
  CHECK(r3.Get().message() ==
        "recv from 2: rank 2 shut down with this transfer pending, after its error: rank 5 "
        "(host h, pid 9) exited or died");
}

TEST_CASE("a connection that ends without a goodbye is a death: on_lost, then the operations") {
  MemoryStore store;
  auto lost = std::make_shared<std::vector<std::string>>();
  auto mu = std::make_shared<std::mutex>();
  PeerChannel::Options o;
  o.on_lost = [lost, mu](const Status& s) {
    std::lock_guard<std::mutex> lock(*mu);
    lost->push_back(s.message());
  };
  auto ch = Open(2, &store, o);
  std::vector<float> got(10, -1);
  Pending r;
  ch[0]->Recv(1, Key{0, 0, 0}, Floats(10), got.data(), "recv from 1", r.done());
  // Rank 1 as a process that dies: its connection ends halfway through a header.
  const int fd = DialAsRank1(&store);
  const char half[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  REQUIRE(send(fd, half, sizeof(half), MSG_NOSIGNAL) == sizeof(half));
  close(fd);
  Status rs = r.Get();
  CHECK(rs.code() == Code::kPeerFailure);
  const std::string why =
      "rank 1 exited or died: its point-to-point connection with rank 0 ended (closed)";
  CHECK(rs.message() == "recv from 1: " + why);
  std::lock_guard<std::mutex> lock(*mu);
  CHECK(*lost == std::vector<std::string>{why});
}

TEST_CASE("within the grace for a lost peer, the job's verdict (Abort) takes precedence") {
  MemoryStore store;
  auto lost = std::make_shared<std::atomic<int>>(0);
  PeerChannel::Options o;
  o.on_lost = [lost](const Status&) { ++*lost; };
  o.lost_grace = std::chrono::milliseconds(5000);
  auto ch = Open(2, &store, o);
  std::vector<float> got(10, -1);
  Pending r;
  ch[0]->Recv(1, Key{0, 0, 0}, Floats(10), got.data(), "recv from 1", r.done());
  close(DialAsRank1(&store));  // rank 1 "died"
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(r.future.wait_for(std::chrono::seconds(0)) != std::future_status::ready);
  ch[0]->Abort(PeerFailure("rank 7 is lost"));
  CHECK(r.Get().message() == "recv from 1: rank 7 is lost");
  CHECK(*lost == 0);
}

TEST_CASE("a send to a peer gone before any connection ends with the job's verdict") {
  // Dialing a dead peer is refused until the dial timeout (10 s here); the verdict ends it.
  MemoryStore store;
  auto ch = Open(2, &store);
  ch[1].reset();  // rank 1 exits: its listener closes
  const auto a = Filled(10, 1);
  Pending s;
  std::thread sender([&] {
    ch[0]->Send(1, Key{0, 0, 0}, Floats(10), a.data(), "send to rank 1", s.done());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ch[0]->Abort(PeerFailure("rank 1 is lost"));
  Status st = s.Get();
  sender.join();
  CHECK(st.code() == Code::kPeerFailure);
  CHECK(st.message() == "send to rank 1: rank 1 is lost");
}

TEST_CASE("a stalled recv, send or message ends in DEADLINE_EXCEEDED naming it") {
  MemoryStore store;
  auto stalls = std::make_shared<std::vector<std::string>>();
  auto mu = std::make_shared<std::mutex>();
  PeerChannel::Options o;
  o.stall = std::chrono::milliseconds(300);
  o.on_stall = [stalls, mu](const Status& s) {
    std::lock_guard<std::mutex> lock(*mu);
    stalls->push_back(s.message());
  };
  auto ch = Open(2, &store, o);
  const auto a = Filled(10, 1);
  std::vector<float> got(10, -1);
  Pending r, s;
  ch[0]->Recv(1, Key{0, 4, 0}, Floats(10), got.data(), "recv from rank 1", r.done());
  ch[0]->Send(1, Key{0, 5, 0}, Floats(10), a.data(), "send to rank 1", s.done());
  Status rs = r.Get(), ss = s.Get();
  CHECK(rs.code() == Code::kDeadlineExceeded);
  CHECK(rs.message() == "recv from rank 1: stalled: the sender sent nothing in 0.3 s");
  CHECK(ss.code() == Code::kDeadlineExceeded);
  CHECK(ss.message() == "send to rank 1: stalled: the receiver posted no matching recv in 0.3 s");
  // Rank 1 never claimed the message of tag 5: its own channel reports it.
  for (int i = 0; i < 100; ++i) {
    {
      std::lock_guard<std::mutex> lock(*mu);
      if (stalls->size() >= 3) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::lock_guard<std::mutex> lock(*mu);
  REQUIRE(stalls->size() == 3);
  CHECK(std::count(stalls->begin(), stalls->end(),
                   "stalled: a message from rank 0 (process set 0, tag 5, #0) waited in 0.3 s "
                   "for its recv on rank 1") == 1);
}

TEST_CASE("Abort fails what is pending and every later call") {
  MemoryStore store;
  auto ch = Open(2, &store);
  std::vector<float> got(10, -1);
  Pending r;
  ch[0]->Recv(1, Key{0, 0, 0}, Floats(10), got.data(), "recv", r.done());
  ch[0]->Abort(PeerFailure("rank 1 died"));
  Status rs = r.Get();
  CHECK(rs.code() == Code::kPeerFailure);
  CHECK(rs.message() == "recv: rank 1 died");
  Pending later;
  ch[0]->Send(1, Key{0, 0, 0}, Floats(10), got.data(), "send", later.done());
  CHECK(later.Get().message() == "send: rank 1 died");
}

}  // namespace
}  // namespace testing
}  // namespace hora
