// Helpers for the coordinator service and client tests: a real service on 127.0.0.1 port 0,
// ranks as threads, and raw gRPC stubs that misbehave on purpose (crash, silence).
#ifndef HORA_TESTS_COORDINATOR_COORDINATOR_TEST_UTIL_H_
#define HORA_TESTS_COORDINATOR_COORDINATOR_TEST_UTIL_H_

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "coordinator/client.h"
#include "coordinator/service.h"
#include "proto/coordinator.grpc.pb.h"

namespace hora {
namespace testing {

using std::chrono::milliseconds;

constexpr char kToken[] = "job-token-1234";
constexpr char kDigest[] = "fusion_threshold=1048576;cpu_backend=gloo";

inline CoordinatorConfig ServiceConfig(int size) {
  CoordinatorConfig c;
  c.listen_address = "127.0.0.1:0";
  c.size = size;
  c.token = kToken;
  c.options_digest = kDigest;
  c.planner.fusion_threshold_bytes = 1 << 20;
  c.planner.cycle_time = milliseconds(2);
  c.start_timeout = milliseconds(10000);
  c.heartbeat_interval = milliseconds(100);
  c.heartbeat_timeout = milliseconds(2000);
  return c;
}

inline std::unique_ptr<CoordinatorService> StartService(const CoordinatorConfig& c) {
  auto s = CoordinatorService::Start(c);
  if (!s.ok()) return nullptr;
  return std::move(s).value();
}

inline ClientConfig ClientFor(const CoordinatorConfig& c, int port, int rank,
                              const std::string& hostname = "host-a") {
  ClientConfig cc;
  cc.address = "127.0.0.1:" + std::to_string(port);
  cc.token = c.token;
  cc.rank = rank;
  cc.size = c.size;
  cc.hostname = hostname;
  cc.pid = 1000 + rank;
  cc.options_digest = c.options_digest;
  cc.start_timeout = c.start_timeout;
  cc.heartbeat_interval = milliseconds(100);
  cc.heartbeat_timeout = milliseconds(5000);
  return cc;
}

// Runs fn(rank) for every rank on its own thread and joins them.
inline void RunRanks(int size, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) threads.emplace_back(fn, r);
  for (auto& t : threads) t.join();
}

// Connects every rank concurrently; a null entry where Connect failed (status in `errors`).
inline std::vector<std::unique_ptr<CoordinatorClient>> ConnectAll(
    const std::vector<ClientConfig>& configs, std::vector<Status>* errors = nullptr) {
  const int n = static_cast<int>(configs.size());
  std::vector<std::unique_ptr<CoordinatorClient>> clients(n);
  std::vector<Status> st(n);
  RunRanks(n, [&](int r) {
    auto c = CoordinatorClient::Connect(configs[r]);
    if (c.ok()) {
      clients[r] = std::move(c).value();
    } else {
      st[r] = c.status();
    }
  });
  if (errors) *errors = st;
  return clients;
}

// Records what a session delivers; thread-safe.
struct Recorder {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<PlanMessage> plans;
  std::vector<int> join_done;
  std::vector<Status> aborts;
  std::chrono::steady_clock::time_point abort_time;

  SessionCallbacks Callbacks() {
    SessionCallbacks cb;
    cb.on_plan = [this](PlanMessage p) {
      std::lock_guard<std::mutex> l(mu);
      plans.push_back(std::move(p));
      cv.notify_all();
    };
    cb.on_join_done = [this](int32_t /*process_set*/, int last) {
      std::lock_guard<std::mutex> l(mu);
      join_done.push_back(last);
      cv.notify_all();
    };
    cb.on_abort = [this](Status s) {
      std::lock_guard<std::mutex> l(mu);
      aborts.push_back(std::move(s));
      abort_time = std::chrono::steady_clock::now();
      cv.notify_all();
    };
    return cb;
  }

  // Waits until pred() (called under mu) or the timeout; returns pred().
  bool WaitFor(milliseconds timeout, const std::function<bool()>& pred) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, timeout, pred);
  }
};

// A rank that talks to the service through a raw stub, to misbehave on purpose.
class RawRank {
 public:
  RawRank(int port, const std::string& token = kToken) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    channel_ = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(port),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = proto::Coordinator::NewStub(channel_);
    token_ = token;
  }
  ~RawRank() {
    if (ctx_) {
      ctx_->TryCancel();
      stream_->Finish();
    }
  }

  grpc::Status Join(proto::JoinRequest request, proto::JoinResponse* response = nullptr) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("hora-token", token_);
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    ctx.set_wait_for_ready(true);
    proto::JoinResponse ignored;
    return stub_->Join(&ctx, request, response ? response : &ignored);
  }

  static proto::JoinRequest Request(int rank, int size, const std::string& host = "raw-host") {
    proto::JoinRequest r;
    r.set_rank(rank);
    r.set_size(size);
    r.set_hostname(host);
    r.set_pid(4242);
    r.set_protocol_version(kProtocolVersion);
    r.set_options_digest(kDigest);
    return r;
  }

  // Opens the session, says Hello and waits for the coordinator's first message (its answer);
  // then says nothing more.
  bool Hello(int rank) {
    ctx_ = std::make_unique<grpc::ClientContext>();
    ctx_->AddMetadata("hora-token", token_);
    stream_ = stub_->Session(ctx_.get());
    proto::WorkerMessage hello;
    hello.mutable_hello()->set_rank(rank);
    proto::CoordinatorMessage answer;
    return stream_->Write(hello) && stream_->Read(&answer);
  }

  bool Write(const proto::WorkerMessage& m) { return stream_->Write(m); }

  // Ends the call without Goodbye, as a crashed process would.
  void Crash() { ctx_->TryCancel(); }

  proto::Coordinator::Stub* stub() { return stub_.get(); }

 private:
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<proto::Coordinator::Stub> stub_;
  std::unique_ptr<grpc::ClientContext> ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<proto::WorkerMessage, proto::CoordinatorMessage>>
      stream_;
};

}  // namespace testing
}  // namespace hora

#endif  // HORA_TESTS_COORDINATOR_COORDINATOR_TEST_UTIL_H_
