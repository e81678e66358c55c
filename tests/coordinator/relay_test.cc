// Host relays (coordinator/host_relay.h) end to end: a real service, real clients and the
// relay on 127.0.0.1, ranks as threads. Rank 0 is alone on host "a"; ranks 1-3 share host "b",
// where rank 1 relays.
#include <catch2/catch.hpp>
#include <set>

#include "tests/coordinator/coordinator_test_util.h"

namespace hora {
namespace testing {
namespace {

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string HostOf(int rank) { return rank == 0 ? "a" : "b"; }

ClientConfig RelayClient(const CoordinatorConfig& c, int port, int rank) {
  ClientConfig cc = ClientFor(c, port, rank, HostOf(rank));
  cc.host_relay = true;
  return cc;
}

ReadyNotice Notice(int t, int rank) {
  ReadyNotice n;
  n.id = static_cast<uint32_t>(100 * rank + t);  // each rank's own ids
  TensorSpec spec;
  spec.name = "w" + std::to_string(t);
  spec.dtype = DataType::kFloat32;
  spec.collective = CollectiveType::kAllreduce;
  spec.shape = {16 + t};
  n.spec = spec;
  return n;
}

TEST_CASE("host relay: a host's ranks negotiate through it with their own ids") {
  const int size = 4;
  CoordinatorConfig config = ServiceConfig(size);
  auto service = StartService(config);
  REQUIRE(service);
  std::vector<ClientConfig> configs;
  for (int r = 0; r < size; ++r) configs.push_back(RelayClient(config, service->port(), r));
  configs[0].local_host = service->local_host();
  std::vector<Status> errors;
  auto clients = ConnectAll(configs, &errors);
  std::vector<std::unique_ptr<Recorder>> recorders;
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r << ": " << errors[r].ToString());
    REQUIRE(clients[r]);
    CHECK(clients[r]->relay_rank() == (r == 0 ? -1 : 1));
    recorders.push_back(std::make_unique<Recorder>());
    REQUIRE(clients[r]->StartSession(recorders[r]->Callbacks()).ok());
  }
  const int kTensors = 6;
  for (int step = 0; step < 3; ++step) {
    RunRanks(size, [&](int r) {
      std::vector<ReadyNotice> notices;
      for (int t = 0; t < kTensors; ++t) notices.push_back(Notice((t + r) % kTensors, r));
      if (step > 0) {
        for (ReadyNotice& n : notices) n.spec.reset();  // ids alone once known
      }
      clients[r]->SendReady(std::move(notices));
    });
    for (int r = 0; r < size; ++r) {
      std::set<uint32_t> ids;
      REQUIRE(recorders[r]->WaitFor(milliseconds(10000), [&] {
        ids.clear();
        for (const PlanMessage& p : recorders[r]->plans) {
          for (const BucketPlan& b : p.buckets) {
            for (const BucketPlan::Entry& e : b.entries) ids.insert(static_cast<uint32_t>(e.id));
          }
        }
        return ids.size() == static_cast<size_t>(kTensors) && recorders[r]->aborts.empty();
      }));
      for (uint32_t id : ids) CHECK(id / 100 == static_cast<uint32_t>(r));
      std::lock_guard<std::mutex> lock(recorders[r]->mu);
      recorders[r]->plans.clear();
    }
  }
  // The relay's ranks go first: the relay drains their sessions before it stops.
  for (int r : {3, 2, 1, 0}) clients[r]->Close();
  for (int r = 0; r < size; ++r) CHECK(recorders[r]->aborts.empty());
  service->Shutdown("test over", milliseconds(1000));
}

// Ranks 0-2 are clients; rank 3 is a raw stream to the relay that ends without Goodbye.
TEST_CASE("host relay: a rank that dies behind the relay is named on every rank") {
  const int size = 4;
  CoordinatorConfig config = ServiceConfig(size);
  auto service = StartService(config);
  REQUIRE(service);
  std::vector<ClientConfig> configs;
  for (int r = 0; r < 3; ++r) configs.push_back(RelayClient(config, service->port(), r));
  configs[0].local_host = service->local_host();
  RawRank direct(service->port());
  std::thread raw_join([&] { CHECK(direct.Join(RawRank::Request(3, size, HostOf(3))).ok()); });
  auto clients = ConnectAll(configs);
  raw_join.join();
  std::vector<std::unique_ptr<Recorder>> recorders;
  for (int r = 0; r < 3; ++r) {
    REQUIRE(clients[r]);
    recorders.push_back(std::make_unique<Recorder>());
    REQUIRE(clients[r]->StartSession(recorders[r]->Callbacks()).ok());
  }
  auto address = clients[0]->Get("hora/relay/1", milliseconds(5000));
  REQUIRE(address.ok());
  const std::string& a = address.value();
  RawRank behind(std::stoi(a.substr(a.rfind(':') + 1)));
  REQUIRE(behind.Hello(3));  // answered by the coordinator, through the relay
  const auto crashed = std::chrono::steady_clock::now();
  behind.Crash();
  for (int r = 0; r < 3; ++r) {
    INFO("rank " << r);
    REQUIRE(
        recorders[r]->WaitFor(milliseconds(10000), [&] { return !recorders[r]->aborts.empty(); }));
    const std::string message = recorders[r]->aborts[0].message();
    INFO(message);
    CHECK(Contains(message, "rank 3"));
    CHECK(Contains(message, "host relay (rank 1)"));
    CHECK(recorders[r]->abort_time - crashed < std::chrono::seconds(5));
  }
  for (int r : {2, 1, 0}) clients[r]->Close();
  service->Shutdown("test over", milliseconds(1000));
}

TEST_CASE("host relay: when the relay stops, the ranks behind it and the coordinator say so") {
  const int size = 4;
  CoordinatorConfig config = ServiceConfig(size);
  auto service = StartService(config);
  REQUIRE(service);
  std::vector<ClientConfig> configs;
  for (int r = 0; r < size; ++r) {
    configs.push_back(RelayClient(config, service->port(), r));
    configs[r].heartbeat_timeout = milliseconds(1000);  // the relay's drain at Close
  }
  configs[0].local_host = service->local_host();
  auto clients = ConnectAll(configs);
  std::vector<std::unique_ptr<Recorder>> recorders;
  for (int r = 0; r < size; ++r) {
    REQUIRE(clients[r]);
    recorders.push_back(std::make_unique<Recorder>());
    REQUIRE(clients[r]->StartSession(recorders[r]->Callbacks()).ok());
  }
  clients[1]->Close();  // the relay rank leaves while ranks 2 and 3 still run
  for (int r : {0, 2, 3}) {
    INFO("rank " << r);
    REQUIRE(
        recorders[r]->WaitFor(milliseconds(10000), [&] { return !recorders[r]->aborts.empty(); }));
    const std::string message = recorders[r]->aborts[0].message();
    INFO(message);
    if (r == 0) {  // the relay's ranks named lost because the relay went away
      CHECK((Contains(message, "host relay, rank 1") ||
             Contains(message, "host relay (rank 1) shut down")));
    } else {  // each of them lost its way to the coordinator
      CHECK((Contains(message, "host relay of rank 1") || Contains(message, "host relay, rank 1") ||
             Contains(message, "host relay (rank 1) shut down")));
    }
  }
  for (int r : {3, 2, 0}) clients[r]->Close();
  service->Shutdown("test over", milliseconds(1000));
}

}  // namespace
}  // namespace testing
}  // namespace hora
