// Faults on the session streams: a crashed rank, a silent rank, a worker failure, a stall
// timeout, a lost coordinator, the coordinator's shutdown, an oversized message.
#include <catch2/catch.hpp>
#include <thread>

#include "tests/coordinator/coordinator_test_util.h"
#include "tests/harness/hang_bound.h"

namespace hora {
namespace testing {
namespace {

using Clock = std::chrono::steady_clock;

bool Contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Ranks 0..size-2 are real clients with sessions; rank size-1 is a raw stub (host raw-host,
// pid 4242) that joins and says Hello.
struct FaultJob {
  CoordinatorConfig config;
  std::unique_ptr<CoordinatorService> service;
  std::vector<std::unique_ptr<CoordinatorClient>> clients;
  std::vector<std::unique_ptr<Recorder>> recorders;
  std::unique_ptr<RawRank> raw;

  bool Start(const CoordinatorConfig& c, bool with_raw, milliseconds client_timeout) {
    config = c;
    service = StartService(c);
    if (!service) return false;
    const int real = with_raw ? c.size - 1 : c.size;
    std::vector<ClientConfig> configs;
    for (int r = 0; r < real; ++r) {
      configs.push_back(ClientFor(c, service->port(), r));
      configs.back().heartbeat_timeout = client_timeout;
    }
    grpc::Status raw_join;
    std::thread raw_thread;
    if (with_raw) {
      raw = std::make_unique<RawRank>(service->port());
      raw_thread = std::thread([&] { raw_join = raw->Join(RawRank::Request(c.size - 1, c.size)); });
    }
    clients = ConnectAll(configs);
    if (raw_thread.joinable()) raw_thread.join();
    if (with_raw && !raw_join.ok()) return false;
    for (int r = 0; r < real; ++r) {
      if (!clients[r]) return false;
      recorders.push_back(std::make_unique<Recorder>());
      if (!clients[r]->StartSession(recorders.back()->Callbacks()).ok()) return false;
    }
    return !with_raw || raw->Hello(c.size - 1);
  }

  // Every real rank got exactly one abort with `code` containing `text`; the product's bound
  // is `bound` after t0, the test allows HangBound(bound) (shared, loaded machines).
  void ExpectAbort(Code code, const std::string& text, Clock::time_point t0, milliseconds bound) {
    for (size_t r = 0; r < recorders.size(); ++r) {
      Recorder* rec = recorders[r].get();
      INFO("rank " << r);
      REQUIRE(rec->WaitFor(testing::HangBound(bound), [&] { return !rec->aborts.empty(); }));
      std::lock_guard<std::mutex> l(rec->mu);
      CHECK(rec->aborts.size() == 1);
      INFO(rec->aborts[0].ToString());
      CHECK(rec->aborts[0].code() == code);
      CHECK(Contains(rec->aborts[0].message(), text));
      CHECK(rec->abort_time - t0 <= testing::HangBound(bound));
    }
  }
};

TEST_CASE("A rank whose stream breaks without Goodbye is reported to all", "[fault]") {
  CoordinatorConfig c = ServiceConfig(4);
  c.heartbeat_timeout = milliseconds(500);
  FaultJob job;
  REQUIRE(job.Start(c, true, milliseconds(5000)));
  const auto t0 = Clock::now();
  job.raw->Crash();
  job.ExpectAbort(Code::kPeerFailure,
                  "rank 3 (host raw-host, pid 4242) is lost: its connection to the coordinator "
                  "broke",
                  t0, 2 * c.heartbeat_timeout);
}

TEST_CASE("A rank that stops sending heartbeats is reported to all", "[fault]") {
  CoordinatorConfig c = ServiceConfig(3);
  c.heartbeat_timeout = milliseconds(500);
  FaultJob job;
  const auto t0 = Clock::now();
  REQUIRE(job.Start(c, true, milliseconds(5000)));
  job.ExpectAbort(Code::kPeerFailure,
                  "rank 2 (host raw-host, pid 4242) is lost: missed heartbeats for 0.", t0,
                  2 * c.heartbeat_timeout);
}

TEST_CASE("A worker's failure aborts the others with its message", "[fault]") {
  FaultJob job;
  REQUIRE(job.Start(ServiceConfig(3), false, milliseconds(5000)));
  const auto t0 = Clock::now();
  job.clients[2]->SendFailure("CUDA error: out of memory");
  job.recorders.pop_back();  // rank 2 itself is not told
  job.ExpectAbort(Code::kPeerFailure,
                  "rank 2 (host host-a, pid 1002) failed: CUDA error: out of memory", t0,
                  milliseconds(1000));
}

TEST_CASE("The stall timeout aborts with the stall report", "[fault]") {
  CoordinatorConfig c = ServiceConfig(3);
  c.stall_warning = milliseconds(100);
  c.stall_timeout = milliseconds(400);
  FaultJob job;
  REQUIRE(job.Start(c, false, milliseconds(5000)));
  const auto t0 = Clock::now();
  for (int r = 0; r < 2; ++r) {
    ReadyNotice n;
    n.id = 1;
    n.spec = TensorSpec();
    n.spec->name = "grad.w";
    n.spec->shape = {4};
    job.clients[r]->SendReady({n});
  }
  job.ExpectAbort(Code::kAborted,
                  "stall timeout: tensor 'grad.w' submitted by ranks 0,1 but not by rank 2 for 0.",
                  t0, milliseconds(1000));
}

// After an abort, a rank that has left the job (its session ended) and joins again is
// starting a new job before rank 0 has replaced this coordinator: it is told to wait
// (UNAVAILABLE, which the client's Join retries), not given the old job's error; a rank that
// is still in the aborted job gets the abort.
TEST_CASE("After an abort, a rank that left and joins again is told to wait", "[fault]") {
  CoordinatorConfig c = ServiceConfig(3);
  c.stall_warning = milliseconds(100);
  c.stall_timeout = milliseconds(400);
  FaultJob job;
  REQUIRE(job.Start(c, false, milliseconds(5000)));
  const auto t0 = Clock::now();
  ReadyNotice n;
  n.id = 1;
  n.spec = TensorSpec();
  n.spec->name = "grad.w";
  n.spec->shape = {4};
  job.clients[0]->SendReady({n});
  job.ExpectAbort(Code::kAborted, "stall timeout: tensor 'grad.w'", t0, milliseconds(1000));
  job.clients[1]->Close();  // rank 1 leaves the aborted job (shutdown)
  RawRank again(job.service->port());
  grpc::Status left = grpc::Status::OK;
  const auto deadline = Clock::now() + HangBound(milliseconds(1000));
  do {  // the session's end reaches the service asynchronously
    left = again.Join(RawRank::Request(1, 3));
    if (left.error_code() != grpc::StatusCode::UNAVAILABLE)
      std::this_thread::sleep_for(milliseconds(20));
  } while (left.error_code() != grpc::StatusCode::UNAVAILABLE && Clock::now() < deadline);
  INFO(left.error_message());
  CHECK(left.error_code() == grpc::StatusCode::UNAVAILABLE);
  CHECK(Contains(left.error_message(), "waiting for rank 0 to start a new one"));
  CHECK(Contains(left.error_message(), "stall timeout: tensor 'grad.w'"));
  grpc::Status stayed = RawRank(job.service->port()).Join(RawRank::Request(2, 3));
  CHECK(stayed.error_code() == grpc::StatusCode::ABORTED);
  CHECK(Contains(stayed.error_message(), "stall timeout: tensor 'grad.w'"));
}

TEST_CASE("A client that hears nothing from the coordinator reports it lost", "[fault]") {
  // One rank: with more, the first watchdog to fire breaks that rank's stream and the
  // coordinator reports that rank lost to the others before their own watchdogs fire.
  CoordinatorConfig c = ServiceConfig(1);
  c.heartbeat_interval = milliseconds(10000);  // the coordinator stays silent
  FaultJob job;
  REQUIRE(job.Start(c, false, milliseconds(400)));
  const auto t0 = Clock::now();
  job.ExpectAbort(Code::kPeerFailure,
                  "lost the coordinator, rank 0 (host host-a, pid 1000) at 127.0.0.1:", t0,
                  milliseconds(800));
  for (auto& rec : job.recorders) CHECK(Contains(rec->aborts[0].message(), "no message for 0.4"));
}

TEST_CASE("Coordinator shutdown: drained ranks end quietly, the rest are aborted", "[fault]") {
  FaultJob job;
  REQUIRE(job.Start(ServiceConfig(3), false, milliseconds(5000)));
  SECTION("no drain") {
    const auto t0 = Clock::now();
    job.service->Shutdown("training finished early", milliseconds(0));
    CHECK(Clock::now() - t0 < testing::HangBound(milliseconds(0)));
    job.ExpectAbort(Code::kAborted, "training finished early", t0, milliseconds(1000));
  }
  SECTION("drain") {
    std::thread closer([&] {
      std::this_thread::sleep_for(milliseconds(200));
      for (auto& client : job.clients) client->Close();
    });
    const auto t0 = Clock::now();
    job.service->Shutdown("done", milliseconds(30000));
    const auto took = Clock::now() - t0;
    closer.join();
    CHECK(took < milliseconds(30000));  // ended by the drain, not by its timeout
    for (auto& rec : job.recorders) CHECK(rec->aborts.empty());
  }
  SECTION("destroyed") {
    const auto t0 = Clock::now();
    job.service.reset();
    job.ExpectAbort(Code::kAborted, "the coordinator was destroyed", t0, milliseconds(1000));
  }
}

TEST_CASE("An oversized session message breaks only that rank; the service survives", "[fault]") {
  CoordinatorConfig c = ServiceConfig(3);
  c.max_message_bytes = 64 << 10;
  FaultJob job;
  REQUIRE(job.Start(c, true, milliseconds(5000)));
  const auto t0 = Clock::now();
  proto::WorkerMessage huge;
  auto* t = huge.mutable_ready()->add_tensors();
  t->set_id(1);
  t->mutable_signature()->set_name(std::string(200 << 10, 'n'));
  job.raw->Write(huge);
  job.ExpectAbort(Code::kPeerFailure, "rank 2 (host raw-host, pid 4242) is lost", t0,
                  milliseconds(1000));
  REQUIRE(job.clients[0]->Set("after", "yes").ok());
  CHECK(job.clients[1]->Get("after", milliseconds(1000)).value() == "yes");
}

}  // namespace
}  // namespace testing
}  // namespace hora
