// A self-contained mutation fuzzer over the coordinator's message handling (no libFuzzer: the
// build uses GCC). Bounded in time; any crash, sanitizer report or HORA_CHECK fails the test.
//
// Phase 1 (pure, ~12 s): bytes from a seeded corpus of valid messages, mutated (bit flips,
// insertions, deletions, truncation, splices) or structure-aware (fields set to extreme or
// random values), are parsed as WorkerMessage, ReadyTensor, Bucket, CoordinatorMessage and
// JoinResponse; whatever parses goes through convert.cc's FromProto, and every accepted
// TensorSpec is submitted to a Planner of 3 ranks (with Join, Poll and Stalled between).
// Phase 2 (service, ~6 s): two raw ranks join a real CoordinatorService and send mutated Ready
// and JoinOp messages on their sessions (reading everything it answers); the coordinator must
// stay up and keep serving the store, and shut down in time.
//
// FUZZ_SECONDS scales both phases (default 18 s in all); FUZZ_SEED picks the seed.
// `fuzz_long_test` runs it for 10 minutes (docs/testing.md). The log stays small: protobuf's
// own error lines (one per string field that is not UTF-8, from parsing and serializing) are
// counted, not printed; a 300 s run once wrote 2.2 GB of them.
#include <google/protobuf/stubs/logging.h>
#include <grpcpp/create_channel.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "coordinator/convert.h"
#include "coordinator/planner.h"
#include "coordinator_test_util.h"
#include "tests/harness/hang_bound.h"

namespace hora {
namespace {

using Clock = std::chrono::steady_clock;
using testing::kToken;

double Budget() {
  const char* s = std::getenv("FUZZ_SECONDS");
  return s ? std::atof(s) : 18.0;
}

struct Fuzzer {
  std::mt19937_64 rng;
  bool binary_names = true;  // names that are not UTF-8 (a session drops such a message)
  explicit Fuzzer(uint64_t seed) : rng(seed) {}

  uint64_t U(uint64_t n) { return n == 0 ? 0 : rng() % n; }
  bool Coin(int one_in) { return U(one_in) == 0; }

  int64_t Extreme() {
    static const int64_t kValues[] = {0,
                                      1,
                                      -1,
                                      2,
                                      3,
                                      7,
                                      1024,
                                      int64_t{1} << 31,
                                      int64_t{1} << 48,
                                      (int64_t{1} << 48) + 1,
                                      std::numeric_limits<int64_t>::max(),
                                      std::numeric_limits<int64_t>::min(),
                                      -(int64_t{1} << 40)};
    return Coin(2) ? kValues[U(sizeof(kValues) / sizeof(kValues[0]))]
                   : static_cast<int64_t>(U(64)) - 8;
  }
  double Scale() {
    static const double kValues[] = {1.0,
                                     0.0,
                                     -1.0,
                                     0.5,
                                     1e308,
                                     -1e308,
                                     std::numeric_limits<double>::quiet_NaN(),
                                     std::numeric_limits<double>::infinity()};
    return kValues[U(8)];
  }
  std::string Name() {
    static const char* const kNames[] = {"a", "b", "grad.w", "grad.b", "x", ""};
    if (Coin(20)) return std::string(U(5000), static_cast<char>('a' + U(26)));
    if (binary_names && Coin(20)) return std::string("\0\xff\x80 bin", 8);
    return kNames[U(6)];
  }

  proto::TensorSignature Signature() {
    proto::TensorSignature s;
    s.set_name(Name());
    s.set_collective(static_cast<int32_t>(Coin(4) ? Extreme() : static_cast<int64_t>(U(7))));
    s.set_dtype(static_cast<int32_t>(Coin(4) ? Extreme() : static_cast<int64_t>(U(9))));
    s.set_op(static_cast<int32_t>(Coin(4) ? Extreme() : static_cast<int64_t>(U(5))));
    const int ndim = Coin(30) ? 70 : static_cast<int>(U(4));
    for (int i = 0; i < ndim; ++i) s.add_shape(Coin(3) ? Extreme() : static_cast<int64_t>(U(9)));
    s.set_device(static_cast<int32_t>(Coin(8) ? Extreme() : 0));
    s.set_root(static_cast<int32_t>(Coin(3) ? Extreme() : static_cast<int64_t>(U(3))));
    s.set_prescale(Coin(3) ? Scale() : 1.0);
    s.set_postscale(Coin(3) ? Scale() : 1.0);
    const int nsplits = Coin(3) ? static_cast<int>(U(5)) : 0;
    for (int i = 0; i < nsplits; ++i)
      s.add_splits(Coin(3) ? Extreme() : static_cast<int64_t>(U(5)));
    return s;
  }

  proto::WorkerMessage Ready(uint32_t max_id) {
    proto::WorkerMessage m;
    const int n = 1 + static_cast<int>(U(4));
    for (int i = 0; i < n; ++i) {
      proto::ReadyTensor* t = m.mutable_ready()->add_tensors();
      t->set_id(static_cast<uint32_t>(Coin(10) ? rng() : U(max_id)));
      if (!Coin(3)) *t->mutable_signature() = Signature();
      if (Coin(2)) {
        t->set_has_payload(true);
        t->set_payload(std::string(Coin(4) ? U(300) : 4 * U(9), static_cast<char>(U(256))));
      }
    }
    return m;
  }

  proto::WorkerMessage Worker() {
    proto::WorkerMessage m;
    switch (U(6)) {
      case 0:
        m.mutable_hello()->set_rank(static_cast<int32_t>(Extreme()));
        break;
      case 1:
        m.mutable_heartbeat();
        break;
      case 2:
        m.mutable_join_op();
        break;
      case 3:
        m.mutable_failure()->set_message(Name());
        break;
      default:
        m = Ready(8);
    }
    return m;
  }

  proto::Bucket Bucket() {
    proto::Bucket b;
    b.set_seq(rng());
    b.set_collective(static_cast<int32_t>(Coin(3) ? Extreme() : static_cast<int64_t>(U(7))));
    b.set_dtype(static_cast<int32_t>(Coin(3) ? Extreme() : static_cast<int64_t>(U(9))));
    b.set_op(static_cast<int32_t>(U(5)));
    b.set_inline_reduced(Coin(2));
    const int n = static_cast<int>(U(4));
    for (int i = 0; i < n; ++i) {
      proto::BucketEntry* e = b.add_entries();
      e->set_id(static_cast<int32_t>(Extreme()));
      e->set_num_elements(Extreme());
      if (Coin(2)) e->add_first_dims(Extreme());
      if (Coin(2)) e->add_recv_splits(Extreme());
      e->set_inline_result(std::string(U(64), 'r'));
    }
    return b;
  }

  // Byte-level mutation of a serialized message.
  std::string Mutate(std::string s, const std::vector<std::string>& corpus) {
    const int rounds = 1 + static_cast<int>(U(4));
    for (int r = 0; r < rounds; ++r) {
      switch (U(6)) {
        case 0:
          if (!s.empty()) s[U(s.size())] ^= static_cast<char>(1u << U(8));
          break;
        case 1:
          s.insert(U(s.size() + 1), std::string(1 + U(8), static_cast<char>(rng())));
          break;
        case 2:
          if (!s.empty()) s.erase(U(s.size()), 1 + U(8));
          break;
        case 3:
          s.resize(U(s.size() + 1));
          break;
        case 4: {
          const std::string& other = corpus[U(corpus.size())];
          s = s.substr(0, U(s.size() + 1)) + other.substr(U(other.size() + 1));
          break;
        }
        default:
          if (!s.empty()) s[U(s.size())] = static_cast<char>(rng());
      }
    }
    return s;
  }
};

// Everything the coordinator does with bytes from a worker, minus the network.
void Consume(const std::string& bytes, Planner* planner, int rank, TimePoint now) {
  proto::WorkerMessage m;
  if (m.ParseFromString(bytes)) {
    if (m.has_ready()) {
      for (const proto::ReadyTensor& t : m.ready().tensors()) {
        ReadyNotice n;
        if (FromProto(t, &n).ok() && n.spec) planner->Submit(rank, *n.spec, now);
      }
    } else if (m.has_join_op()) {
      planner->Join(rank, now);
    }
  }
  proto::ReadyTensor rt;
  if (rt.ParseFromString(bytes)) {
    ReadyNotice n;
    (void)FromProto(rt, &n);
  }
  proto::Bucket b;
  BucketPlan bp;
  if (b.ParseFromString(bytes)) (void)FromProto(b, &bp);
  proto::CoordinatorMessage c;
  PlanMessage pm;
  if (c.ParseFromString(bytes) && c.has_plan()) (void)FromProto(c.plan(), &pm);
  proto::JoinResponse j;
  Topology topo;
  if (j.ParseFromString(bytes)) (void)FromProto(j, &topo);
}

// While alive, protobuf's log lines are counted instead of printed (the first is kept).
// Process-wide: protobuf has one log handler.
class ProtobufLogCounter {
 public:
  ProtobufLogCounter() {
    count_ = 0;
    first_.clear();
    previous_ = google::protobuf::SetLogHandler(&Count);
  }
  ~ProtobufLogCounter() { google::protobuf::SetLogHandler(previous_); }
  ProtobufLogCounter(const ProtobufLogCounter&) = delete;
  ProtobufLogCounter& operator=(const ProtobufLogCounter&) = delete;

  long count() const { return count_; }
  std::string first() const {
    std::lock_guard<std::mutex> lock(mu_);
    return first_;
  }

 private:
  static void Count(google::protobuf::LogLevel, const char* file, int line,
                    const std::string& message) {
    if (count_++ == 0) {
      std::lock_guard<std::mutex> lock(mu_);
      first_ = std::string(file) + ":" + std::to_string(line) + ": " + message;
    }
  }
  static std::atomic<long> count_;
  static std::mutex mu_;
  static std::string first_;
  google::protobuf::LogHandler* previous_;
};
std::atomic<long> ProtobufLogCounter::count_{0};
std::mutex ProtobufLogCounter::mu_;
std::string ProtobufLogCounter::first_;

void ReportProtobufLog(const ProtobufLogCounter& log) {
  WARN("protobuf logged " << log.count() << " lines (not printed)"
                          << (log.count() > 0 ? "; the first: " + log.first() : ""));
}

uint64_t Seed() {
  const char* s = std::getenv("FUZZ_SEED");
  return s ? std::strtoull(s, nullptr, 10) : 20240601;
}

TEST_CASE("fuzz: message parsing, conversion and planning never crash", "[fuzz]") {
  ProtobufLogCounter log;
  Fuzzer f(Seed());
  std::vector<std::string> corpus;
  for (int i = 0; i < 64; ++i) corpus.push_back(f.Worker().SerializeAsString());
  for (int i = 0; i < 16; ++i) corpus.push_back(f.Bucket().SerializeAsString());
  PlannerConfig pc;
  pc.size = 3;
  pc.fusion_threshold_bytes = 1024;
  auto planner = std::make_unique<Planner>(pc);
  TimePoint now = Clock::now();
  const auto deadline = Clock::now() + std::chrono::duration<double>(Budget() * 2 / 3);
  long inputs = 0, emitted = 0;
  while (Clock::now() < deadline) {
    for (int i = 0; i < 256; ++i, ++inputs) {
      std::string bytes;
      switch (f.U(3)) {
        case 0:
          bytes = f.Mutate(corpus[f.U(corpus.size())], corpus);
          break;
        case 1:
          bytes = f.Worker().SerializeAsString();
          break;
        default:
          bytes = f.Bucket().SerializeAsString();
      }
      now += std::chrono::microseconds(f.U(5000));
      Consume(bytes, planner.get(), static_cast<int>(f.U(3)), now);
      if (f.Coin(8)) {
        PlannerOutput out = planner->Poll(now);
        emitted += static_cast<long>(out.buckets.size() + out.failures.size());
      }
      if (f.Coin(64)) (void)planner->Stalled(now, std::chrono::milliseconds(f.U(100)));
      if (f.Coin(16) && corpus.size() < 4096) corpus.push_back(bytes);
    }
    if (f.Coin(20)) planner = std::make_unique<Planner>(pc);  // fresh state now and then
  }
  WARN("phase 1: " << inputs << " inputs, " << emitted << " buckets/failures emitted");
  ReportProtobufLog(log);
  CHECK(inputs > 1000);
}

// A raw rank that joined and opened its session; a thread reads (and drops) what comes back.
struct FuzzRank {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<proto::Coordinator::Stub> stub;
  grpc::ClientContext ctx;
  std::unique_ptr<grpc::ClientReaderWriter<proto::WorkerMessage, proto::CoordinatorMessage>> stream;
  std::thread reader;
  std::atomic<long> received{0};
  std::atomic<bool> aborted{false};

  explicit FuzzRank(int port) {
    channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                  grpc::InsecureChannelCredentials());
    stub = proto::Coordinator::NewStub(channel);
  }
  bool Open(int rank) {
    ctx.AddMetadata("hora-token", kToken);
    stream = stub->Session(&ctx);
    proto::WorkerMessage hello;
    hello.mutable_hello()->set_rank(rank);
    if (!stream->Write(hello)) return false;
    reader = std::thread([this] {
      proto::CoordinatorMessage m;
      while (stream->Read(&m)) {
        ++received;
        if (m.has_abort()) aborted = true;
      }
    });
    return true;
  }
  void Close() {
    stream->WritesDone();
    ctx.TryCancel();
    reader.join();
    stream->Finish();
  }
};

TEST_CASE("fuzz: a live coordinator survives mutated session messages", "[fuzz]") {
  ProtobufLogCounter log;
  CoordinatorConfig c = testing::ServiceConfig(2);
  c.heartbeat_timeout = std::chrono::milliseconds(30000);
  c.max_message_bytes = 1 << 20;
  auto service = testing::StartService(c);
  REQUIRE(service);
  std::vector<std::unique_ptr<testing::RawRank>> joiners;
  std::vector<std::thread> threads;
  std::vector<grpc::Status> joined(2);
  for (int r = 0; r < 2; ++r)
    joiners.push_back(std::make_unique<testing::RawRank>(service->port()));
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { joined[r] = joiners[r]->Join(testing::RawRank::Request(r, 2)); });
  }
  for (auto& t : threads) t.join();
  REQUIRE(joined[0].ok());
  REQUIRE(joined[1].ok());
  std::vector<std::unique_ptr<FuzzRank>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<FuzzRank>(service->port()));
    REQUIRE(ranks[r]->Open(r));
  }
  Fuzzer f(Seed() + 1);
  // A message that does not parse (a name that is not UTF-8) ends the sender's session: gRPC
  // drops it, the rank is lost and the job aborted naming it. Here every message parses, so
  // that the whole phase exercises the Ready handling.
  f.binary_names = false;
  const auto deadline = Clock::now() + std::chrono::duration<double>(Budget() / 3);
  long sent = 0;
  while (Clock::now() < deadline) {
    const int r = static_cast<int>(f.U(2));
    proto::WorkerMessage m = f.Coin(20) ? proto::WorkerMessage() : f.Ready(6);
    if (f.Coin(30)) m.mutable_join_op();
    if (!ranks[r]->stream->Write(m)) break;
    ++sent;
  }
  // Still serving: a store round trip with the token works.
  testing::RawRank probe(service->port());
  grpc::ClientContext sctx;
  sctx.AddMetadata("hora-token", kToken);
  sctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  proto::StoreSetRequest set;
  set.set_key("fuzz/alive");
  set.set_value("yes");
  proto::StoreSetResponse set_resp;
  CHECK(probe.stub()->StoreSet(&sctx, set, &set_resp).ok());
  WARN("phase 2: sent " << sent << " messages, received " << ranks[0]->received + ranks[1]->received
                        << (ranks[0]->aborted || ranks[1]->aborted ? " (job aborted)" : ""));
  CHECK(sent > 100);
  CHECK_FALSE(ranks[0]->aborted);
  CHECK_FALSE(ranks[1]->aborted);
  const auto t0 = Clock::now();
  service->Shutdown("fuzz over", std::chrono::milliseconds(0));
  for (auto& r : ranks) r->Close();
  CHECK(Clock::now() - t0 < hora::testing::HangBound(std::chrono::milliseconds(0)));
  ReportProtobufLog(log);
}

}  // namespace
}  // namespace hora
