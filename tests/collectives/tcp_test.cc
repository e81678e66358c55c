// The tcp backend beyond the shared battery (collective_battery_test.cc runs that on it):
// the folded postscale, Send / Recv with tags out of order and beside collectives, option
// checks. Members are threads on loopback (tcp_ranks.h), with the default options and with
// tiny pieces (every striped and pipelined path on small data).
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/reduce.h"
#include "tests/collectives/dtype_values.h"
#include "tests/collectives/tcp_ranks.h"

using namespace hora;
using namespace hora::testing;

namespace {

TcpOptions Pick(int which) { return which == 0 ? TcpOptions() : TinyPieces(); }

}  // namespace

TEST_CASE("tcp allreduce with the postscale folded in: bit for bit Allreduce then the scale",
          "[tcp]") {
  const int size = GENERATE(1, 2, 3, 4, 7);
  const int which = GENERATE(0, 1);
  CAPTURE(size, which);
  auto failures = RunRanksWith(size, TcpFactory(Pick(which)), [&](Communicator& comm) {
    if (!comm.folds_postscale()) return std::string("folds_postscale() is false");
    for (size_t count : {size_t{1}, size_t{999}, size_t{100003}}) {
      for (DataType t : {DataType::kFloat32, DataType::kFloat16, DataType::kInt32}) {
        for (const Postscale& post : {Postscale{1.0, comm.size()}, Postscale{0.37, 1}}) {
          const size_t bytes = count * DataTypeSize(t);
          std::vector<uint8_t> a(bytes), b(bytes);
          FillInput(t, ReduceOp::kSum, comm.rank(), a.data(), count);
          b = a;
          RANK_OK(comm.AllreduceScaled(a.data(), count, t, ReduceOp::kSum, post));
          RANK_OK(comm.Allreduce(b.data(), count, t, ReduceOp::kSum));
          ScaleInPlace(b.data(), count, t, post);
          RANK_EXPECT(
              CompareBytes(a.data(), b.data(), bytes, Label("scaled", t, ReduceOp::kSum, count)));
        }
      }
    }
    return std::string();
  });
  REQUIRE(JoinFailures(failures) == "");
}

TEST_CASE("tcp send/recv: sizes from 0 to several pieces, tags out of order, beside collectives",
          "[tcp]") {
  const int which = GENERATE(0, 1);
  CAPTURE(which);
  auto failures = RunRanksWith(3, TcpFactory(Pick(which)), [&](Communicator& comm) {
    const int me = comm.rank(), n = comm.size();
    auto fill = [](int from, uint32_t tag, size_t bytes) {
      std::vector<uint8_t> v(bytes);
      for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(from * 31 + tag * 7 + i);
      return v;
    };
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{5000}, size_t{300000}}) {
      // Each member sends tag 1 then tag 2 to the next; the next receives tag 2 first (held
      // message of tag 1), with an allreduce between the sends and the receives.
      const int to = (me + 1) % n, from = (me + n - 1) % n;
      const auto one = fill(me, 1, bytes), two = fill(me, 2, bytes);
      RANK_OK(comm.Send(one.data(), bytes, to, 1));
      RANK_OK(comm.Send(two.data(), bytes, to, 2));
      int32_t x = me;
      RANK_OK(comm.Allreduce(&x, 1, DataType::kInt32, ReduceOp::kSum));
      if (x != n * (n - 1) / 2) return "allreduce between sends gave " + std::to_string(x);
      std::vector<uint8_t> got2(bytes, 0xEE), got1(bytes, 0xEE);
      RANK_OK(comm.Recv(got2.data(), bytes, from, 2));
      RANK_OK(comm.Recv(got1.data(), bytes, from, 1));
      RANK_EXPECT(CompareBytes(got2.data(), fill(from, 2, bytes).data(), bytes, "tag 2"));
      RANK_EXPECT(CompareBytes(got1.data(), fill(from, 1, bytes).data(), bytes, "tag 1"));
    }
    uint8_t b = 0;
    if (comm.Send(&b, 1, me, 0).code() != Code::kInvalidArgument) return std::string("self send");
    if (comm.Recv(&b, 1, n, 0).code() != Code::kInvalidArgument) return std::string("bad peer");
    return std::string();
  });
  REQUIRE(JoinFailures(failures) == "");
}

TEST_CASE("tcp recv of another size than was sent fails on the receiver, not sticky", "[tcp]") {
  auto failures = RunRanksWith(2, TcpFactory(TcpOptions()), [&](Communicator& comm) {
    std::vector<uint8_t> buf(100, 1);
    if (comm.rank() == 0) {
      RANK_OK(comm.Send(buf.data(), 100, 1, 9));
    } else {
      Status s = comm.Recv(buf.data(), 50, 0, 9);
      if (s.code() != Code::kInvalidArgument ||
          s.message().find("sent 100 bytes") == std::string::npos) {
        return "mismatched recv gave " + s.ToString();
      }
    }
    RANK_OK(comm.Barrier());
    return std::string();
  });
  REQUIRE(JoinFailures(failures) == "");
}

TEST_CASE("tcp refuses bad options, naming the field", "[tcp]") {
  MemoryStore store;
  TcpOptions o;
  o.channels = 0;
  auto comm = CreateTcpCommunicator(TcpTestConfig(0, 1, &store, std::chrono::seconds(1)), o);
  REQUIRE(comm.status().code() == Code::kInvalidArgument);
  CHECK(comm.status().message().find("channels") != std::string::npos);
  o = TcpOptions();
  o.piece_bytes = 1;
  comm = CreateTcpCommunicator(TcpTestConfig(0, 1, &store, std::chrono::seconds(1)), o);
  REQUIRE(comm.status().code() == Code::kInvalidArgument);
  CHECK(comm.status().message().find("piece_bytes") != std::string::npos);
}

TEST_CASE("tcp options from the environment: defaults, values, and errors naming the variable",
          "[tcp]") {
  std::map<std::string, std::string> vars;
  auto env = [&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  auto o = TcpOptionsFromEnv(env);
  REQUIRE(o.ok());
  CHECK(o.value().channels == TcpOptions().channels);
  vars = {{"HORA_TCP_CHANNELS", "4"},
          {"HORA_TCP_PIECE_BYTES", "1048576"},
          {"HORA_TCP_SMALL_ALLREDUCE_BYTES", "0"},
          {"HORA_TCP_PAIR_DOUBLING_BYTES", "0"},
          {"HORA_TCP_SOCKET_BUFFER_BYTES", "4194304"},
          {"HORA_TCP_INFLIGHT_BYTES", "0"},
          {"HORA_TCP_SPIN_US", "7"}};
  o = TcpOptionsFromEnv(env);
  REQUIRE(o.ok());
  CHECK(o.value().channels == 4);
  CHECK(o.value().piece_bytes == 1048576);
  CHECK(o.value().small_allreduce_bytes == 0);
  CHECK(o.value().pair_doubling_bytes == 0);
  CHECK(o.value().socket_buffer_bytes == 4194304);
  CHECK(o.value().inflight_bytes == 0);
  CHECK(o.value().spin_us == 7);
  vars = {{"HORA_TCP_CHANNELS", "0"}};
  o = TcpOptionsFromEnv(env);
  REQUIRE(o.status().code() == Code::kInvalidArgument);
  CHECK(o.status().message().find("HORA_TCP_CHANNELS=0") != std::string::npos);
  vars = {{"HORA_TCP_SPIN_US", "-1"}};
  CHECK(TcpOptionsFromEnv(env).status().message().find("HORA_TCP_SPIN_US=-1") != std::string::npos);
  vars = {{"HORA_TCP_PIECE_BYTES", "12x"}};
  CHECK(TcpOptionsFromEnv(env).status().message().find("HORA_TCP_PIECE_BYTES") !=
        std::string::npos);
}

TEST_CASE("tcp refuses members whose options differ, naming the variables", "[tcp]") {
  auto failures = RunRanksWith(
      2,
      [](int rank, int size, KvStore* store, std::chrono::milliseconds timeout) {
        TcpOptions o;
        if (rank == 1) o.piece_bytes = 8192;
        return CreateTcpCommunicator(TcpTestConfig(rank, size, store, timeout), o);
      },
      [](Communicator&) { return std::string(); }, std::chrono::milliseconds(2000));
  INFO(JoinFailures(failures));
  CHECK(failures[1].find("HORA_TCP_PIECE_BYTES") != std::string::npos);
  CHECK(failures[1].find("INVALID_ARGUMENT") != std::string::npos);
}
