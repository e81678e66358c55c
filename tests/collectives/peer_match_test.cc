// The matching half of the point-to-point channel (collectives/peer_match.h), driven as the
// transport drives it: a recv posted while its message's body is arriving takes the rest of
// the body straight into its output, and only a recv that takes the message is redirected.
#include "collectives/peer_match.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace hora {
namespace {

using Key = PeerMatch::Key;
using Meta = PeerMatch::Meta;

constexpr int kConn = 7;
constexpr int kPeer = 1;

// Runs the completions an Effects holds; returns their statuses in order.
std::vector<Status> Finish(PeerMatch::Effects* e) {
  std::vector<Status> out;
  for (auto& [done, s] : e->done) {
    if (done) done(s);
    out.push_back(s);
  }
  e->done.clear();
  return out;
}

PeerMatch::Done Into(Status* where) {
  return [where](Status s) { *where = std::move(s); };
}

TEST_CASE("a recv posted while its body arrives takes the rest straight into its output") {
  PeerMatch m(0);
  PeerMatch::Effects e;
  const Key key{0, 3, 0};
  const Meta meta{DataType::kFloat32, 16};
  const std::string sent = "0123456789abcdef";
  char* buffer = m.Arriving(kConn, kPeer, key, meta, &e);  // no recv yet: a buffer of its own
  REQUIRE(buffer != nullptr);
  std::memcpy(buffer, sent.data(), 6);  // 6 bytes in when the recv comes

  std::vector<char> out(16, 'x');
  Status got = Internal("not run");
  std::unique_ptr<char[]> data;
  PeerMatch::Take take;
  CHECK_FALSE(m.Recv(kPeer, key, meta, out.data(), "recv", Into(&got), &e, &data, &take));
  CHECK_FALSE(data);
  REQUIRE(e.redirects == std::vector<int>{kConn});

  std::unique_ptr<char[]> arrived;
  char* to = m.Redirect(kConn, kPeer, key, &arrived);
  REQUIRE(to == out.data());
  REQUIRE(arrived.get() == buffer);
  std::memcpy(to, arrived.get(), 6);                          // the transport copies what it read
  std::memcpy(to + 6, sent.data() + 6, 10);                   // and reads the rest into the output
  CHECK(m.Redirect(kConn, kPeer, key, &arrived) == nullptr);  // once

  m.Arrived(kConn, kPeer, key, &e);
  REQUIRE(e.answers.size() == 1);
  CHECK(e.answers[0].conn == kConn);
  CHECK(e.answers[0].status.ok());
  REQUIRE(Finish(&e).size() == 1);
  CHECK(got.ok());
  CHECK(std::string(out.begin(), out.end()) == sent);

  m.Stalls(std::chrono::milliseconds(0), &e);  // nothing left behind
  CHECK(e.stalls.empty());
}

TEST_CASE("a recv that does not take the arriving message is not redirected") {
  PeerMatch m(0);
  PeerMatch::Effects e;
  const Key key{0, 0, 4};
  char* buffer = m.Arriving(kConn, kPeer, key, Meta{DataType::kFloat32, 8}, &e);
  REQUIRE(buffer != nullptr);
  std::vector<char> out(4);
  Status got = Internal("not run");
  std::unique_ptr<char[]> data;
  PeerMatch::Take take;
  m.Recv(kPeer, key, Meta{DataType::kFloat32, 4}, out.data(), "recv", Into(&got), &e, &data, &take);
  std::unique_ptr<char[]> arrived;
  CHECK(m.Redirect(kConn, kPeer, key, &arrived) == nullptr);
  CHECK_FALSE(arrived);

  m.Arrived(kConn, kPeer, key, &e);  // the whole body came: both sides hear the mismatch
  REQUIRE(e.answers.size() == 1);
  CHECK(e.answers[0].status.code() == Code::kMismatch);
  Finish(&e);
  CHECK(got.code() == Code::kMismatch);
  CHECK(got.message().find("the size differs: the sender sends 8 bytes") != std::string::npos);
}

TEST_CASE("no redirect once the peer is lost; the connection's close fails the recv") {
  PeerMatch m(0);
  PeerMatch::Effects e;
  const Key key{0, 0, 0};
  const Meta meta{DataType::kInt32, 4};
  REQUIRE(m.Arriving(kConn, kPeer, key, meta, &e) != nullptr);
  std::vector<char> out(4);
  Status got = Internal("not run");
  std::unique_ptr<char[]> data;
  PeerMatch::Take take;
  m.Recv(kPeer, key, meta, out.data(), "recv", Into(&got), &e, &data, &take);
  m.Lost(kPeer, PeerFailure("rank 1 died"), &e);
  Finish(&e);
  CHECK(got.code() == Code::kPeerFailure);
  std::unique_ptr<char[]> arrived;
  CHECK(m.Redirect(kConn, kPeer, key, &arrived) == nullptr);
  m.Closed(kConn, PeerFailure("closed"), &e);  // the cut-off message is forgotten
  CHECK(Finish(&e).empty());
}

TEST_CASE(
    "a parked message waits for its recv, whose transport reads it before the answer; "
    "one it could not read waits for its peer's verdict") {
  PeerMatch m(0);
  PeerMatch::Effects e;
  const Meta meta{DataType::kFloat32, 1 << 20};
  std::vector<char> out(1 << 20);
  std::unique_ptr<char[]> data;

  // No recv yet: parked. The recv takes it: no answer and no completion until it is read.
  REQUIRE(m.Park(kConn, kPeer, Key{0, 1, 0}, meta));
  PeerMatch::Take take;
  Status got = Internal("not run");
  CHECK(m.Recv(kPeer, Key{0, 1, 0}, meta, out.data(), "recv", Into(&got), &e, &data, &take));
  CHECK_FALSE(data);
  CHECK(take.conn == kConn);
  REQUIRE(take.done);
  CHECK(e.answers.empty());
  CHECK(e.done.empty());

  // A recv waits already: not parked (the transport reads it at once).
  PeerMatch::Take none;
  CHECK_FALSE(m.Recv(kPeer, Key{0, 2, 0}, meta, out.data(), "recv", Into(&got), &e, &data, &none));
  CHECK_FALSE(m.Park(kConn, kPeer, Key{0, 2, 0}, meta));
  CHECK_FALSE(none.done);

  // A size that differs: answered and failed at once, nothing to read.
  REQUIRE(m.Park(kConn, kPeer, Key{0, 3, 0}, meta));
  PeerMatch::Take mismatch;
  Status bad;
  CHECK(m.Recv(kPeer, Key{0, 3, 0}, Meta{DataType::kFloat32, 8}, out.data(), "recv", Into(&bad), &e,
               &data, &mismatch));
  CHECK_FALSE(mismatch.done);
  REQUIRE(e.answers.size() == 1);
  CHECK(e.answers[0].status.code() == Code::kMismatch);
  CHECK(Finish(&e)[0].code() == Code::kMismatch);
  e.answers.clear();

  // Refused by this side: answered with the refusal.
  REQUIRE(m.Park(kConn, kPeer, Key{0, 4, 0}, meta));
  m.RefuseRecv(kPeer, Key{0, 4, 0}, InvalidArgument("bad recv"), &e);
  REQUIRE(e.answers.size() == 1);
  CHECK(e.answers[0].status.code() == Code::kInvalidArgument);
  e.answers.clear();

  // Its connection ends: gone, so a later recv waits for a message (and the peer's fate).
  REQUIRE(m.Park(kConn, kPeer, Key{0, 5, 0}, meta));
  m.Closed(kConn, PeerFailure("closed"), &e);
  PeerMatch::Take after;
  CHECK_FALSE(m.Recv(kPeer, Key{0, 5, 0}, meta, out.data(), "recv", Into(&got), &e, &data, &after));
  CHECK_FALSE(after.done);

  // Unclaimed for the stall time: a stall naming it.
  REQUIRE(m.Park(kConn, kPeer, Key{0, 6, 0}, meta));
  m.Stalls(std::chrono::milliseconds(0), &e);
  bool named = false;
  for (const Status& s : e.stalls) named |= s.message().find("tag 6") != std::string::npos;
  CHECK(named);

  // Taken but it could not be read (its sender died): pending again until the peer's verdict.
  (void)Finish(&e);
  REQUIRE(m.Park(kConn, kPeer, Key{0, 7, 0}, meta));
  PeerMatch::Take unread;
  REQUIRE(m.Recv(kPeer, Key{0, 7, 0}, meta, out.data(), "recv 7", Into(&got), &e, &data, &unread));
  m.Unread(kPeer, Key{0, 7, 0}, std::move(unread), &e);
  CHECK(e.done.empty());
  m.Lost(kPeer, PeerFailure("rank 1 died"), &e);
  std::vector<Status> lost = Finish(&e);
  CHECK(std::find_if(lost.begin(), lost.end(), [](const Status& s) {
          return s.message() == "recv 7: rank 1 died";
        }) != lost.end());

  // The peer was gone already: at once, with its verdict.
  REQUIRE(m.Park(kConn, 2, Key{0, 2, 0}, meta));
  PeerMatch::Take late;
  REQUIRE(m.Recv(2, Key{0, 2, 0}, meta, out.data(), "recv 2", Into(&got), &e, &data, &late));
  m.Lost(2, PeerFailure("rank 2 died"), &e);
  m.Unread(2, Key{0, 2, 0}, std::move(late), &e);
  REQUIRE(Finish(&e).size() == 1);
  CHECK(got.message() == "recv 2: rank 2 died");
}

}  // namespace
}  // namespace hora
