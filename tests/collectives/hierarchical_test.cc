// The hierarchical backend, members as threads with fake hostnames (tests/collectives/
// hier_ranks.h): the layout helpers, when the registry picks it, and its allreduce over every
// dtype and op at 2 hosts x 2, 2 x 3, 3 x 2 and interleaved hosts, with counts that leave
// shards uneven or empty, 0, and a 16 MiB buffer. Values are small integers
// (dtype_values.h), so every result is exact and compared byte for byte with a reference
// computed from every rank's known input.
#include <catch2/catch.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/hierarchical/hierarchical_communicator.h"
#include "collectives/hierarchical/host_layout.h"
#include "tests/collectives/allreduce_exact.h"
#include "tests/collectives/dtype_values.h"
#include "tests/collectives/hier_ranks.h"

using namespace hora;
using namespace hora::testing;

namespace {

// The layouts every correctness test runs on.
std::vector<std::vector<std::string>> Layouts() {
  return {Hosts(2, 2), Hosts(2, 3), Hosts(3, 2), {"a", "b", "a", "b", "b", "a"}};
}

std::string Describe(const std::vector<std::string>& hosts) {
  std::string s;
  for (const auto& h : hosts) s += (s.empty() ? "" : ",") + h;
  return s;
}

// Checks the backend's name, then meets the others in a barrier: a member that destroyed
// its communicator while a peer was still finishing its connections would fail that peer.
RankBody NameIs(const std::string& want) {
  return [want](Communicator& c) -> std::string {
    if (c.name() != want) return "backend " + std::string(c.name()) + ", expected " + want;
    RANK_OK(c.Barrier());
    return "";
  };
}

}  // namespace

TEST_CASE("hierarchical layout: hosts in order of first member, shards, cross groups") {
  const HostLayout l = LayoutOf({"b", "a", "b", "a", "a", "b"}, 3);
  REQUIRE(l.host_names == std::vector<std::string>{"b", "a"});
  REQUIRE(l.host_ranks == std::vector<std::vector<int>>{{0, 2, 5}, {1, 3, 4}});
  REQUIRE(l.host == 1);
  REQUIRE(l.local_rank == 1);
  REQUIRE(l.cross_group(1) == std::vector<int>{2, 3});
  REQUIRE(l.cross_group(2) == std::vector<int>{4, 5});
  REQUIRE(l.uniform());
  REQUIRE(ShardCounts(10, 3) == std::vector<size_t>{4, 3, 3});
  REQUIRE(ShardCounts(2, 3) == std::vector<size_t>{1, 1, 0});
  REQUIRE(ShardCounts(0, 2) == std::vector<size_t>{0, 0});
  BackendConfig c;
  c.rank = 3;
  c.global_ranks = {1, 4, 6, 8, 9, 12};
  c.hostnames = {"b", "a", "b", "a", "a", "b"};
  const BackendConfig sub = SubConfig(c, l.cross_group(1), "p/");
  REQUIRE(sub.rank == 1);
  REQUIRE(sub.global_ranks == std::vector<int>{6, 8});
  REQUIRE(sub.hostnames == std::vector<std::string>{"b", "a"});
  REQUIRE(sub.key_prefix == "p/");
}

TEST_CASE(
    "hierarchical selection: auto takes it across hosts, shm on one host, tcp at one per host") {
  REQUIRE(IsBackendBuilt(kHierarchicalBackend));
  REQUIRE(JoinFailures(RunHierRanks(Hosts(2, 2), NameIs("hierarchical"), "auto")) == "");
  REQUIRE(JoinFailures(RunHierRanks(Hosts(3, 2), NameIs("hierarchical"), "auto")) == "");
  REQUIRE(JoinFailures(RunHierRanks(Hosts(2, 2), NameIs("tcp"), "avoid:hierarchical")) == "");
  REQUIRE(JoinFailures(RunHierRanks(Hosts(2, 2), NameIs("gloo"), "gloo")) == "");
  REQUIRE(JoinFailures(RunHierRanks(Hosts(1, 3), NameIs("shm"), "prefer:hierarchical")) == "");
  REQUIRE(JoinFailures(RunHierRanks(Hosts(1, 3), NameIs("shm"), "auto")) == "");
  REQUIRE(JoinFailures(RunHierRanks(Hosts(3, 1), NameIs("tcp"), "prefer:hierarchical")) == "");
  // Named where it cannot serve: the option, the reason and the layout.
  BackendConfig c = HierConfig(0, {"a", "a", "b"}, nullptr, std::chrono::milliseconds(1000));
  auto refused = CreateCommunicator("hierarchical", "HORA_CPU_OPERATIONS", c);
  REQUIRE_FALSE(refused.ok());
  REQUIRE(refused.status().message().find(
              "HORA_CPU_OPERATIONS=hierarchical: backend 'hierarchical' cannot serve") !=
          std::string::npos);
  REQUIRE(refused.status().message().find(
              "the same number of members on every host: a (2 ranks), b (1 ranks)") !=
          std::string::npos);
  c = HierConfig(0, Hosts(1, 2), nullptr, std::chrono::milliseconds(1000));
  REQUIRE(CanServeHierarchical(c).message().find("span several hosts") != std::string::npos);
  c = HierConfig(0, Hosts(2, 1), nullptr, std::chrono::milliseconds(1000));
  REQUIRE(CanServeHierarchical(c).message().find("one per host") != std::string::npos);
  // A selection prefix without a name is refused.
  REQUIRE(CheckSelection("avoid:", Device::kCpu, "X").message().find("followed by a backend") !=
          std::string::npos);
}

// Every member's BackendConfig::env sets HORA_HIERARCHICAL_CHUNK_BYTES to `value` (rank
// `odd_rank`, when >= 0, to `odd_value`).
std::function<void(BackendConfig*)> ChunkBytes(const char* value, int odd_rank = -1,
                                               const char* odd_value = nullptr) {
  return [=](BackendConfig* c) {
    const char* mine = c->rank == odd_rank ? odd_value : value;
    c->env = [mine](const char* name) -> const char* {
      return std::string(name) == kEnvHierarchicalChunkBytes ? mine : nullptr;
    };
  };
}

// AllreduceEveryDtypeAndOp of `counts` on every layout, with `tweak` applied to the configs:
// "" or each layout's failures.
std::string EveryDtypeAndOp(const std::vector<size_t>& counts,
                            const std::function<void(BackendConfig*)>& tweak) {
  std::string all;
  for (const auto& hosts : Layouts()) {
    auto failures = RunHierRanks(
        hosts,
        [&counts](Communicator& comm) -> std::string {
          return AllreduceEveryDtypeAndOp(comm, counts);
        },
        "hierarchical", std::chrono::milliseconds(20000), tweak);
    const std::string f = JoinFailures(failures);
    if (!f.empty()) all += "hosts " + Describe(hosts) + ": " + f + "\n";
  }
  return all;
}

TEST_CASE("hierarchical allreduce: every dtype and op, uneven and empty shards, exact") {
  REQUIRE(EveryDtypeAndOp({0, 1, 2, 5, 1001, 40003}, nullptr) == "");
}

TEST_CASE("hierarchical allreduce: 16 MiB of floats and 16 MiB of int32, twice") {
  for (const auto& hosts : {Hosts(2, 2), Hosts(2, 3)}) {
    auto failures = RunHierRanks(hosts, [](Communicator& comm) -> std::string {
      const size_t count = (size_t{4} << 20) + 3;  // 16 MiB and an uneven tail
      for (DataType t : {DataType::kFloat32, DataType::kInt32}) {
        const size_t bytes = count * DataTypeSize(t);
        std::vector<uint8_t> in(bytes), want(bytes);
        FillInput(t, ReduceOp::kSum, comm.rank(), in.data(), count);
        FillExpected(t, ReduceOp::kSum, comm.size(), want.data(), count);
        for (int round = 0; round < 2; ++round) {
          std::vector<uint8_t> b = in;
          RANK_OK(comm.Allreduce(b.data(), count, t, ReduceOp::kSum));
          RANK_EXPECT(CompareBytes(b.data(), want.data(), bytes,
                                   Label("allreduce", t, ReduceOp::kSum, count)));
        }
      }
      return "";
    });
    INFO("hosts " << Describe(hosts));
    REQUIRE(JoinFailures(failures) == "");
  }
}

TEST_CASE("hierarchical allreduce in chunks: every dtype and op, exact, whatever the chunk size") {
  // 16 KiB chunks: 40003 elements are 3 to 20 chunks, the last one short, by dtype.
  REQUIRE(EveryDtypeAndOp({1001, 40003}, ChunkBytes("16384")) == "");
  // One byte: chunks of one element per host member, so the last chunk of 5 or 7 elements
  // leaves some members' shards empty.
  REQUIRE(EveryDtypeAndOp({1, 5, 7}, ChunkBytes("1")) == "");
  // 0: never cut (the three steps one after the other, on the calling thread).
  REQUIRE(EveryDtypeAndOp({40003}, ChunkBytes("0")) == "");
}

TEST_CASE(
    "hierarchical: a chunk size that differs between members fails creation on every "
    "member, naming the variable") {
  struct Case {
    const char* odd;  // rank 2's value; nullptr: unset there
    const char* want;
  };
  for (const Case& c : {Case{"1024", "65536 on set rank 0, 1024 on set rank 2"},
                        Case{nullptr, "65536 on set rank 0, unset on set rank 2"}}) {
    auto failures = RunHierRanks(
        Hosts(2, 2), [](Communicator&) -> std::string { return "created"; }, "hierarchical",
        std::chrono::milliseconds(20000), ChunkBytes("65536", 2, c.odd));
    for (size_t r = 0; r < failures.size(); ++r) {
      INFO("rank " << r << ": " << failures[r]);
      CHECK(failures[r].find(std::string("HORA_HIERARCHICAL_CHUNK_BYTES must be the same on "
                                         "every member of the set: ") +
                             c.want) != std::string::npos);
    }
  }
}

TEST_CASE("hierarchical options: the chunk size from the environment, bad values named") {
  auto env = [](const char* value) {
    return [value](const char* name) -> const char* {
      return std::string(name) == kEnvHierarchicalChunkBytes ? value : nullptr;
    };
  };
  CHECK(!HierarchicalOptionsFromEnv(nullptr).value().chunk_bytes.has_value());
  CHECK(!HierarchicalOptionsFromEnv(env("")).value().chunk_bytes.has_value());
  CHECK(HierarchicalOptionsFromEnv(env("0")).value().chunk_bytes == size_t{0});
  CHECK(HierarchicalOptionsFromEnv(env("1048576")).value().chunk_bytes == size_t{1048576});
  for (const char* bad : {"-1", "4MiB", "1e6", "2000000000000"}) {
    auto o = HierarchicalOptionsFromEnv(env(bad));
    INFO(bad);
    REQUIRE(!o.ok());
    CHECK(o.status().code() == Code::kInvalidArgument);
    CHECK(o.status().message() == std::string("HORA_HIERARCHICAL_CHUNK_BYTES=") + bad +
                                      ": expected a whole number of bytes in [0, 2^40]");
  }
}
