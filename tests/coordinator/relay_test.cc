// Host relays (coordinator/host_relay.h) end to end: a real service, real clients and the
// relay on 127.0.0.1, ranks as threads. Rank 0 is alone on host "a"; ranks 1-3 share host "b",
// where rank 1 relays.
#include <catch2/catch.hpp>
#include <mutex>
#include <set>
#include <thread>

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

// A service and the clients of ranks 0..real-1 with their sessions open.
struct RelayJob {
  CoordinatorConfig config = ServiceConfig(4);
  std::unique_ptr<CoordinatorService> service;
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  std::vector<std::unique_ptr<Recorder>> recorders;
  // Whether the ranks answer diagnosis requests, as the runtime's responder does (each
  // answer from its own thread: the request may come while the service holds its lock).
  bool answer_diagnoses = false;
  std::mutex answers_mu;
  std::vector<std::thread> answers;

  ~RelayJob() { JoinAnswers(); }

  // `beside` runs while the clients connect (a raw rank's Join); the heartbeat timeout is
  // also the relay's drain when its rank closes.
  void Start(int real, milliseconds heartbeat_timeout,
             const std::function<void(int port)>& beside = nullptr) {
    service = StartService(config);
    REQUIRE(service);
    std::vector<ClientConfig> configs;
    for (int r = 0; r < real; ++r) {
      configs.push_back(RelayClient(config, service->port(), r));
      configs[r].heartbeat_timeout = heartbeat_timeout;
      configs[r].max_message_bytes = config.max_message_bytes;
    }
    configs[0].local_host = service->local_host();
    std::thread other;
    if (beside) other = std::thread(beside, service->port());
    std::vector<Status> errors;
    clients = ConnectAll(configs, &errors);
    if (other.joinable()) other.join();
    for (int r = 0; r < real; ++r) {
      INFO("rank " << r << ": " << errors[r].ToString());
      REQUIRE(clients[r]);
      CHECK(clients[r]->relay_rank() == (r == 0 ? -1 : 1));
      recorders.push_back(std::make_unique<Recorder>());
      SessionCallbacks callbacks = recorders[r]->Callbacks();
      if (answer_diagnoses) {
        callbacks.on_diagnose = [this, r](DiagnosisRequest request) {
          std::lock_guard<std::mutex> l(answers_mu);
          answers.emplace_back([this, r, id = request.id] {
            DiagnosisReport report;
            report.id = id;
            clients[r]->SendDiagnosis(report);
          });
        };
      }
      REQUIRE(clients[r]->StartSession(std::move(callbacks)).ok());
    }
  }

  // The first abort `rank` heard, waited for up to 20 s.
  std::string AbortOf(int rank) {
    Recorder& rec = *recorders[rank];
    REQUIRE(rec.WaitFor(milliseconds(20000), [&] { return !rec.aborts.empty(); }));
    return rec.aborts[0].message();
  }

  // Closes the given ranks' clients in that order, then the service.
  void Stop(std::initializer_list<int> order) {
    JoinAnswers();
    for (int r : order) clients[r]->Close();
    service->Shutdown("test over", milliseconds(1000));
  }

  void JoinAnswers() {
    std::vector<std::thread> done;
    {
      std::lock_guard<std::mutex> l(answers_mu);
      done.swap(answers);
    }
    for (std::thread& t : done) t.join();
  }
};

TEST_CASE("host relay: a host's ranks negotiate through it with their own ids") {
  const int size = 4;
  RelayJob job;
  job.Start(size, milliseconds(5000));
  auto& clients = job.clients;
  auto& recorders = job.recorders;
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
  job.Stop({3, 2, 1, 0});
  for (int r = 0; r < size; ++r) CHECK(recorders[r]->aborts.empty());
}

// Ranks 0-2 are clients; rank 3 is a raw stream to the relay that ends without Goodbye.
TEST_CASE("host relay: the host's messages together may pass the message limit") {
  // Each rank's burst and each rank's plans fit the limit, as the client and the coordinator
  // split them; the relay's stream carries the three relayed ranks' at once, and must not
  // put them in one message past the limit (a write past it breaks the stream, and every rank
  // of the host would be reported lost).
  const int size = 4;
  const int kTensors = 400;  // about 10 KiB of notices and of plan per rank
  RelayJob job;
  job.config.max_message_bytes = 16 << 10;
  job.config.planner.fusion_threshold_bytes = 1 << 10;  // small buckets: plans split between them
  job.Start(size, milliseconds(5000));
  auto& recorders = job.recorders;
  auto send = [&](int r) {
    std::vector<ReadyNotice> notices;
    for (int t = 0; t < kTensors; ++t) notices.push_back(Notice(t, r));
    job.clients[r]->SendReady(std::move(notices));
  };
  // The relayed ranks first; rank 0's notices then complete every tensor at once, so the
  // plans for the three relayed ranks queue together.
  RunRanks(size - 1, [&](int i) { send(i + 1); });
  std::this_thread::sleep_for(milliseconds(300));
  send(0);
  for (int r = 0; r < size; ++r) {
    INFO("rank " << r);
    size_t entries = 0;
    REQUIRE(recorders[r]->WaitFor(milliseconds(20000), [&] {
      entries = 0;
      for (const PlanMessage& p : recorders[r]->plans) {
        for (const BucketPlan& b : p.buckets) entries += b.entries.size();
      }
      return entries == static_cast<size_t>(kTensors) || !recorders[r]->aborts.empty();
    }));
    CHECK(recorders[r]->aborts.empty());
    CHECK(entries == static_cast<size_t>(kTensors));
  }
  job.Stop({3, 2, 1, 0});
}

TEST_CASE("host relay: a rank that dies behind the relay is named on every rank") {
  RelayJob job;
  std::unique_ptr<RawRank> direct;  // rank 3's Join, straight to the coordinator
  job.Start(3, milliseconds(5000), [&](int port) {
    direct = std::make_unique<RawRank>(port);
    CHECK(direct->Join(RawRank::Request(3, 4, HostOf(3))).ok());
  });
  auto address = job.clients[0]->Get("hora/relay/1", milliseconds(5000));
  REQUIRE(address.ok());
  const std::string& a = address.value();
  RawRank behind(std::stoi(a.substr(a.rfind(':') + 1)));
  REQUIRE(behind.Hello(3));  // answered by the coordinator, through the relay
  const auto crashed = std::chrono::steady_clock::now();
  behind.Crash();
  for (int r = 0; r < 3; ++r) {
    const std::string message = job.AbortOf(r);
    INFO("rank " << r << ": " << message);
    CHECK(Contains(message, "rank 3"));
    CHECK(Contains(message, "host relay (rank 1)"));
    // A hang guard, not a measurement: detection is immediate, then the diagnosis round
    // (HORA_DIAGNOSE_SECONDS, 3 s by default) runs before the abort.
    CHECK(job.recorders[r]->abort_time - crashed < std::chrono::seconds(15));
  }
  job.Stop({2, 1, 0});
}

TEST_CASE("host relay: when the relay stops, the ranks behind it and the coordinator say so") {
  RelayJob job;
  job.Start(4, milliseconds(1000));
  job.clients[1]->Close();  // the relay rank leaves while ranks 2 and 3 still run
  for (int r : {0, 2, 3}) {
    const std::string message = job.AbortOf(r);
    INFO("rank " << r << ": " << message);
    if (r == 0) {  // the relay's ranks named lost because the relay went away
      CHECK((Contains(message, "host relay, rank 1") ||
             Contains(message, "host relay (rank 1) shut down")));
    } else {  // each of them lost its way to the coordinator
      CHECK((Contains(message, "host relay of rank 1") || Contains(message, "host relay, rank 1") ||
             Contains(message, "host relay (rank 1) shut down")));
    }
  }
  job.Stop({3, 2, 0});
}

// The ranks behind a relay that died are lost with it: the diagnosis round before the abort
// must not wait for their answers until its deadline (a launcher stops the survivors first).
TEST_CASE("host relay: a relay's death aborts the job without waiting for its ranks' answers") {
  RelayJob job;
  job.config.diagnose_deadline = milliseconds(60000);
  job.answer_diagnoses = true;
  job.Start(4, milliseconds(1000));
  job.clients[1]->Close();
  for (int r : {0, 2, 3}) {
    Recorder& rec = *job.recorders[r];
    INFO("rank " << r);
    // Well under the 60 s deadline: only the survivors' answers (milliseconds) are awaited.
    CHECK(rec.WaitFor(milliseconds(20000), [&] { return !rec.aborts.empty(); }));
  }
  job.Stop({3, 2, 0});
}

}  // namespace
}  // namespace testing
}  // namespace hora
