// Send and Recv on the shm communicator: matching per (peer, tag) in order whatever the order
// of tags, messages larger than the ring, both directions at once, and size mismatches.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "collectives/shm/shm_communicator.h"
#include "tests/collectives/shm_test_util.h"

using namespace hora;
using hora::testing::CompareBytes;
using hora::testing::JoinFailures;
using hora::testing::RunShmRanks;
using hora::testing::ShmTweak;
using hora::testing::TinyChunks;

namespace {

// The content of message `n` from `from` to `to` with `tag`.
std::vector<uint8_t> Message(int from, int to, uint32_t tag, int n, size_t bytes) {
  std::vector<uint8_t> m(bytes);
  for (size_t i = 0; i < bytes; ++i)
    m[i] = static_cast<uint8_t>(from * 53 + to * 19 + tag * 7 + n * 3 + i);
  return m;
}

ShmTweak Tweak(int which) { return which == 0 ? ShmTweak() : ShmTweak(TinyChunks); }

}  // namespace

TEST_CASE("shm send/recv: matched per tag in order, whatever order the tags are received in",
          "[shm]") {
  const int tweak = GENERATE(0, 1);
  const size_t bytes = GENERATE(size_t{1}, size_t{1000}, size_t{600000});  // 600 KB > any ring
  CAPTURE(tweak, bytes);
  // Rank 0 sends tags 1, 2, 1, 3, 2 (message n of a tag carries n); rank 1 receives 3, 2, 1, 2, 1.
  const std::vector<uint32_t> sent = {1, 2, 1, 3, 2};
  const std::vector<uint32_t> received = {3, 2, 1, 2, 1};
  auto run = RunShmRanks(
      2,
      [&](Communicator& comm) -> std::string {
        std::map<uint32_t, int> count;
        if (comm.rank() == 0) {
          for (uint32_t tag : sent) {
            auto m = Message(0, 1, tag, count[tag]++, bytes);
            RANK_OK(comm.Send(m.data(), m.size(), 1, tag));
          }
        } else {
          for (uint32_t tag : received) {
            std::vector<uint8_t> got(bytes, 0xEE);
            RANK_OK(comm.Recv(got.data(), got.size(), 0, tag));
            auto want = Message(0, 1, tag, count[tag]++, bytes);
            RANK_EXPECT(CompareBytes(got.data(), want.data(), bytes, "tag " + std::to_string(tag)));
          }
        }
        RANK_OK(comm.Barrier());
        return "";
      },
      Tweak(tweak));
  REQUIRE(JoinFailures(run.failures) == "");
}

TEST_CASE("shm send/recv: every rank sends to every other first, then receives", "[shm]") {
  const int size = GENERATE(2, 3, 4, 7);
  const int tweak = GENERATE(0, 1);
  CAPTURE(size, tweak);
  auto run = RunShmRanks(
      size,
      [&](Communicator& comm) -> std::string {
        const int n = comm.size(), me = comm.rank();
        for (size_t bytes : {size_t{3}, size_t{70001}, size_t{1} << 20}) {
          for (int i = 1; i < n; ++i) {  // far more than a ring holds, before anyone receives
            const int to = (me + i) % n;
            auto m = Message(me, to, 9, 0, bytes);
            RANK_OK(comm.Send(m.data(), bytes, to, 9));
          }
          for (int i = 1; i < n; ++i) {
            const int from = (me + n - i) % n;
            std::vector<uint8_t> got(bytes);
            RANK_OK(comm.Recv(got.data(), bytes, from, 9));
            auto want = Message(from, me, 9, 0, bytes);
            RANK_EXPECT(
                CompareBytes(got.data(), want.data(), bytes, "from " + std::to_string(from)));
          }
        }
        // Zero bytes move nothing and need no peer.
        RANK_OK(comm.Send(nullptr, 0, (me + 1) % n, 1));
        RANK_OK(comm.Recv(nullptr, 0, (me + n - 1) % n, 1));
        if (comm.Send(nullptr, 1, me, 1).code() != Code::kInvalidArgument) {
          return std::string("send to self was accepted");
        }
        if (comm.Recv(nullptr, 1, n, 1).code() != Code::kInvalidArgument) {
          return std::string("recv from rank n was accepted");
        }
        return "";
      },
      Tweak(tweak));
  REQUIRE(JoinFailures(run.failures) == "");
}

TEST_CASE("shm send/recv interleaved with collectives (a pipeline step)", "[shm]") {
  auto run = RunShmRanks(3, [&](Communicator& comm) -> std::string {
    const int n = comm.size(), me = comm.rank();
    for (int step = 0; step < 50; ++step) {
      std::vector<float> act(1000 + step, static_cast<float>(me + step));
      if (me > 0) {
        std::vector<float> in(act.size());
        RANK_OK(comm.Recv(in.data(), in.size() * 4, me - 1, 100 + step));
        if (in[0] != static_cast<float>(me - 1 + step)) return std::string("wrong activation");
      }
      if (me < n - 1) RANK_OK(comm.Send(act.data(), act.size() * 4, me + 1, 100 + step));
      float g = 1;
      RANK_OK(comm.Allreduce(&g, 1, DataType::kFloat32, ReduceOp::kSum));
      if (g != n) return std::string("wrong allreduce");
    }
    return "";
  });
  REQUIRE(JoinFailures(run.failures) == "");
}

TEST_CASE("shm send/recv: a size mismatch is an error naming both sizes", "[shm]") {
  auto run = RunShmRanks(2, [&](Communicator& comm) -> std::string {
    std::vector<uint8_t> buf(100);
    if (comm.rank() == 0) {
      RANK_OK(comm.Send(buf.data(), 100, 1, 5));
      return "";
    }
    Status s = comm.Recv(buf.data(), 60, 0, 5);
    if (s.ok() || s.message().find("sent 100 bytes, this rank expects 60") == std::string::npos) {
      return "mismatch not reported: " + s.ToString();
    }
    return "";
  });
  REQUIRE(JoinFailures(run.failures) == "");
}
