// Join, store, authentication and robustness of the coordinator service, with ranks as
// threads in one process against a real service on 127.0.0.1.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <random>

#include "coordinator/core.h"
#include "tests/coordinator/coordinator_test_util.h"
#include "tests/harness/hang_bound.h"

namespace hora {
namespace testing {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST_CASE("ComputeTopology groups ranks by hostname", "[service]") {
  std::vector<RankInfo> in(5);
  const char* hosts[] = {"b", "a", "b", "c", "a"};
  for (int i = 0; i < 5; ++i) {
    in[i].rank = i;
    in[i].hostname = hosts[i];
  }
  Topology t = ComputeTopology(in);
  // Hosts in order of their lowest rank: b (0), a (1), c (3).
  std::vector<int> local, local_size, cross;
  for (const RankInfo& r : t.ranks) {
    local.push_back(r.local_rank);
    local_size.push_back(r.local_size);
    cross.push_back(r.cross_rank);
    CHECK(r.cross_size == 3);
  }
  CHECK(local == std::vector<int>{0, 0, 1, 0, 1});
  CHECK(local_size == std::vector<int>{2, 2, 2, 1, 2});
  CHECK(cross == std::vector<int>{0, 1, 0, 2, 1});
}

TEST_CASE("Join returns the topology to every rank", "[service]") {
  for (int size : {1, 2, 3, 4, 7}) {
    DYNAMIC_SECTION("size " << size) {
      CoordinatorConfig config = ServiceConfig(size);
      auto service = StartService(config);
      REQUIRE(service);
      std::vector<ClientConfig> configs;
      for (int r = 0; r < size; ++r) {
        // Two ranks per host: host-0 has ranks 0,1; host-1 has 2,3; ...
        configs.push_back(ClientFor(config, service->port(), r, "host-" + std::to_string(r / 2)));
      }
      std::vector<Status> errors;
      auto clients = ConnectAll(configs, &errors);
      for (int r = 0; r < size; ++r) {
        INFO("rank " << r << ": " << errors[r].ToString());
        REQUIRE(clients[r]);
        const Topology& t = clients[r]->topology();
        REQUIRE(static_cast<int>(t.ranks.size()) == size);
        for (int q = 0; q < size; ++q) {
          CHECK(t.ranks[q].rank == q);
          CHECK(t.ranks[q].hostname == "host-" + std::to_string(q / 2));
          CHECK(t.ranks[q].pid == 1000 + q);
          CHECK(t.ranks[q].local_rank == q % 2);
          CHECK(t.ranks[q].local_size == std::min(2, size - (q / 2) * 2));
          CHECK(t.ranks[q].cross_rank == q / 2);
          CHECK(t.ranks[q].cross_size == (size + 1) / 2);
        }
      }
    }
  }
}

TEST_CASE("The start timeout names the missing ranks", "[service]") {
  CoordinatorConfig config = ServiceConfig(4);
  config.start_timeout = milliseconds(500);
  auto service = StartService(config);
  REQUIRE(service);
  std::vector<ClientConfig> configs = {ClientFor(config, service->port(), 0),
                                       ClientFor(config, service->port(), 1)};
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<Status> errors;
  auto clients = ConnectAll(configs, &errors);
  const auto took = std::chrono::steady_clock::now() - t0;
  for (int r = 0; r < 2; ++r) {
    CHECK(!clients[r]);
    CHECK(errors[r].code() == Code::kDeadlineExceeded);
    CHECK(Contains(errors[r].message(), "ranks 2,3 of 4 did not join within 0.5 s"));
  }
  CHECK(took < testing::HangBound(milliseconds(500)));
  // A rank that comes later is refused at once with the same reason.
  auto late = CoordinatorClient::Connect(ClientFor(config, service->port(), 2));
  CHECK(late.status().code() == Code::kDeadlineExceeded);
}

TEST_CASE("A wrong token is refused and the job beside it goes on", "[service]") {
  CoordinatorConfig config = ServiceConfig(2);
  auto service = StartService(config);
  REQUIRE(service);
  ClientConfig bad = ClientFor(config, service->port(), 0);
  bad.token = "not-the-token";
  auto refused = CoordinatorClient::Connect(bad);
  CHECK(refused.status().code() == Code::kUnauthenticated);
  RawRank raw(service->port(), "wrong");
  grpc::ClientContext ctx;
  ctx.AddMetadata("hora-token", "wrong");
  proto::StoreSetRequest set;
  set.set_key("k");
  proto::StoreSetResponse resp;
  CHECK(raw.stub()->StoreSet(&ctx, set, &resp).error_code() == grpc::StatusCode::UNAUTHENTICATED);

  auto clients =
      ConnectAll({ClientFor(config, service->port(), 0), ClientFor(config, service->port(), 1)});
  REQUIRE(clients[0]);
  REQUIRE(clients[1]);
  REQUIRE(clients[0]->Set("k", "v").ok());
  CHECK(clients[1]->Get("k", milliseconds(1000)).value() == "v");
}

TEST_CASE("Mismatched options, version, size and duplicate ranks are refused", "[service]") {
  CoordinatorConfig config = ServiceConfig(2);
  auto service = StartService(config);
  REQUIRE(service);
  SECTION("options digest") {
    ClientConfig c = ClientFor(config, service->port(), 1);
    c.options_digest = "fusion_threshold=2048;cpu_backend=gloo";
    auto r = CoordinatorClient::Connect(c);
    CHECK(r.status().code() == Code::kFailedPrecondition);
    CHECK(Contains(r.status().message(),
                   "option fusion_threshold is '2048' on rank 1 but '1048576' on the coordinator"));
  }
  SECTION("protocol version") {
    RawRank raw(service->port());
    proto::JoinRequest req = RawRank::Request(1, 2);
    req.set_protocol_version(kProtocolVersion + 41);
    grpc::Status st = raw.Join(req);
    CHECK(st.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(Contains(st.error_message(), "protocol version differs: 43 on rank 1 but 2"));
  }
  SECTION("size and rank") {
    ClientConfig c = ClientFor(config, service->port(), 1);
    c.size = 3;
    auto r = CoordinatorClient::Connect(c);
    CHECK(r.status().code() == Code::kInvalidArgument);
    CHECK(Contains(r.status().message(), "size 3 but the coordinator has size 2"));
    RawRank raw(service->port());
    CHECK(raw.Join(RawRank::Request(5, 2)).error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  }
  SECTION("duplicate rank") {
    auto clients =
        ConnectAll({ClientFor(config, service->port(), 0), ClientFor(config, service->port(), 1)});
    REQUIRE(clients[0]);
    REQUIRE(clients[1]);
    auto dup = CoordinatorClient::Connect(ClientFor(config, service->port(), 0, "other-host"));
    CHECK(dup.status().code() == Code::kAlreadyExists);
    CHECK(Contains(dup.status().message(),
                   "rank 0 has already joined as rank 0 (host host-a, pid 1000); refused host "
                   "other-host"));
  }
}

TEST_CASE("Connect fails with UNAVAILABLE naming the address", "[service]") {
  CoordinatorConfig config = ServiceConfig(1);
  ClientConfig c = ClientFor(config, 1, 0);  // nothing listens on port 1
  c.start_timeout = milliseconds(300);
  auto r = CoordinatorClient::Connect(c);
  CHECK(r.status().code() == Code::kUnavailable);
  CHECK(Contains(r.status().message(), "127.0.0.1:1"));
}

TEST_CASE("Connect waits for a coordinator that starts later", "[service]") {
  // Find a free port, then start the service on it after the client began connecting.
  CoordinatorConfig config = ServiceConfig(1);
  int port;
  {
    auto probe = StartService(config);
    REQUIRE(probe);
    port = probe->port();
  }
  config.listen_address = "127.0.0.1:" + std::to_string(port);
  StatusOr<std::unique_ptr<CoordinatorClient>> client = Status();
  std::thread t([&] { client = CoordinatorClient::Connect(ClientFor(config, port, 0)); });
  std::this_thread::sleep_for(milliseconds(300));
  auto service = StartService(config);
  REQUIRE(service);
  t.join();
  CHECK(client.ok());
}

TEST_CASE("Store: set, get, wait for a key, timeout", "[service]") {
  CoordinatorConfig config = ServiceConfig(2);
  auto service = StartService(config);
  REQUIRE(service);
  auto clients =
      ConnectAll({ClientFor(config, service->port(), 0), ClientFor(config, service->port(), 1)});
  REQUIRE(clients[0]);
  REQUIRE(clients[1]);
  REQUIRE(clients[0]->Set("nccl/id", std::string("\0\1\2", 3)).ok());
  auto v = clients[1]->Get("nccl/id", milliseconds(100));
  REQUIRE(v.ok());
  CHECK(v.value() == std::string("\0\1\2", 3));

  Status late_set;
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(100));
    late_set = clients[1]->Set("late", "here");
  });
  auto late = clients[0]->Get("late", milliseconds(5000));
  setter.join();
  CHECK(late_set.ok());
  REQUIRE(late.ok());
  CHECK(late.value() == "here");

  const auto t0 = std::chrono::steady_clock::now();
  auto missing = clients[0]->Get("never", milliseconds(200));
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(missing.status().code() == Code::kDeadlineExceeded);
  CHECK(Contains(missing.status().message(), "'never'"));
  CHECK(took >= milliseconds(200));
  CHECK(took < testing::HangBound(milliseconds(200)));
}

TEST_CASE("Garbage bytes and oversized messages do not hurt the service", "[service]") {
  CoordinatorConfig config = ServiceConfig(2);
  config.max_message_bytes = 64 << 10;
  auto service = StartService(config);
  REQUIRE(service);
  std::mt19937 rng(7);
  for (int i = 0; i < 20; ++i) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(service->port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    std::string junk(1 + rng() % 4096, '\0');
    for (char& c : junk) c = static_cast<char>(rng());
    if (i % 2 == 0) junk = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + junk;  // a valid preface first
    (void)!write(fd, junk.data(), junk.size());
    close(fd);
  }
  ClientConfig big0 = ClientFor(config, service->port(), 0);
  big0.max_message_bytes = 1 << 20;
  auto clients = ConnectAll({big0, ClientFor(config, service->port(), 1)});
  REQUIRE(clients[0]);
  REQUIRE(clients[1]);
  Status too_big = clients[0]->Set("big", std::string(100 << 10, 'x'));
  CHECK(too_big.code() == Code::kInvalidArgument);
  // A session message over the limit breaks that rank's stream only; the store still works.
  REQUIRE(clients[0]->Set("small", "ok").ok());
  CHECK(clients[1]->Get("small", milliseconds(1000)).value() == "ok");
}

}  // namespace
}  // namespace testing
}  // namespace hora
