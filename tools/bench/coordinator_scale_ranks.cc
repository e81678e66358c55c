#include "tools/bench/coordinator_scale_ranks.h"

#include <algorithm>
#include <thread>

#include "coordinator/convert.h"

namespace hora {
namespace scale_bench {
namespace {

using std::chrono::milliseconds;

// Runs fn(i) for i in [0, n) on `threads` threads, i by stride.
template <typename Fn>
void ForEachParallel(int n, int threads, Fn fn) {
  threads = std::max(1, std::min(threads, n));
  std::vector<std::thread> pool;
  for (int k = 0; k < threads; ++k) {
    pool.emplace_back([&, k] {
      for (int i = k; i < n; i += threads) fn(i);
    });
  }
  for (auto& t : pool) t.join();
}

}  // namespace

CoordinatorConfig BenchServiceConfig(int ranks) {
  CoordinatorConfig c;
  c.listen_address = "127.0.0.1:0";
  c.size = ranks;
  c.token = kBenchToken;
  c.options_digest = kBenchDigest;
  c.start_timeout = milliseconds(120000);
  return c;
}

SimulatedRanks::SimulatedRanks(const ScaleOptions& options)
    : options_(options), specs_(ModelTensors(options.tensors)) {
  for (int r = 0; r < options.ranks; ++r) sinks_.push_back(std::make_unique<Sink>(options.tensors));
}

SimulatedRanks::~SimulatedRanks() { Close(); }

Status SimulatedRanks::Connect(const std::string& address, LocalSessionHost* local) {
  const CoordinatorConfig service = BenchServiceConfig(options_.ranks);
  const int n = options_.ranks;
  clients_.resize(n);
  std::vector<Status> errors(n);
  // Join blocks until every rank has joined: one thread per rank. The threads start 2 ms
  // apart: 1,024 channels connecting at once overran the listener here (gRPC retried until
  // the process ran out of descriptors).
  ForEachParallel(n, n, [&](int r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2) * r);
    ClientConfig c;
    c.address = address;
    c.token = service.token;
    c.rank = r;
    c.size = n;
    c.hostname = "sim-host-" + std::to_string(r / 8);  // 8 ranks per simulated host
    c.pid = 10000 + r;
    c.options_digest = service.options_digest;
    c.start_timeout = service.start_timeout;
    c.local_host = local;
    c.host_relay = options_.relay && local == nullptr;
    auto client = CoordinatorClient::Connect(c);
    if (!client.ok()) {
      errors[r] = client.status();
      return;
    }
    clients_[r] = std::move(client).value();
  });
  for (int r = 0; r < n; ++r) {
    if (!errors[r].ok())
      return Status(errors[r].code(), "rank " + std::to_string(r) + ": " + errors[r].message());
  }
  std::vector<Status> started(n);
  ForEachParallel(n, std::min(n, 64), [&](int r) {
    SessionCallbacks cb;
    cb.on_plan = [this, r](PlanMessage plan) { OnPlan(r, std::move(plan)); };
    cb.on_abort = [this, r](Status s) { OnAbort(r, s); };
    started[r] = clients_[r]->StartSession(std::move(cb));
  });
  for (int r = 0; r < n; ++r) {
    if (!started[r].ok()) return started[r];
  }
  return Status::Ok();
}

void SimulatedRanks::OnPlan(int rank, PlanMessage plan) {
  Sink& sink = *sinks_[rank];
  int64_t entries = 0;
  bool ok = true;
  for (const BucketPlan& b : plan.buckets) {
    for (const BucketPlan::Entry& e : b.entries) {
      ok = ok && sink.checker.Entry(b.seq, e.id);
      ++entries;
    }
  }
  std::string error = ok ? "" : "rank " + std::to_string(rank) + ": " + sink.checker.error();
  if (!plan.errors.empty()) {
    error =
        "rank " + std::to_string(rank) + " got a tensor error: " + plan.errors[0].status.ToString();
  }
  int64_t bytes = 0;
  if (rank == 0) {
    proto::CoordinatorMessage message;
    ToProto(plan, message.mutable_plan());
    bytes = static_cast<int64_t>(message.ByteSizeLong());
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++sink.messages;
  sink.bytes += bytes;
  sink.buckets += static_cast<int64_t>(plan.buckets.size());
  entries_ += entries;
  if (!error.empty() && error_.empty()) error_ = error;
  if (entries_ >= target_ || !error_.empty()) cv_.notify_all();
}

void SimulatedRanks::OnAbort(int rank, const Status& status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (error_.empty()) error_ = "rank " + std::to_string(rank) + " aborted: " + status.ToString();
  cv_.notify_all();
}

std::vector<ReadyNotice> SimulatedRanks::Notices(int begin, int end, bool signatures) const {
  std::vector<ReadyNotice> notices(end - begin);
  for (int t = begin; t < end; ++t) {
    ReadyNotice& n = notices[t - begin];
    n.id = static_cast<uint32_t>(t + 1);
    if (signatures) n.spec = specs_[t];
  }
  return notices;
}

Status SimulatedRanks::Step(int step, bool signatures) {
  const int n = options_.ranks;
  const int tensors = options_.tensors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    target_ = entries_ + static_cast<int64_t>(n) * tensors;
  }
  // Each driver sends chunk c of each of its ranks, then chunk c + 1.
  const int drivers = std::max(1, std::min(options_.drivers, n));
  std::vector<std::thread> pool;
  for (int k = 0; k < drivers; ++k) {
    pool.emplace_back([&, k] {
      for (const auto& [begin, end] : NoticeChunks(options_)) {
        for (int r = k; r < n; r += drivers)
          clients_[r]->SendReady(Notices(begin, end, signatures));
      }
    });
  }
  for (auto& t : pool) t.join();
  std::unique_lock<std::mutex> lock(mu_);
  const bool done = cv_.wait_for(lock, options_.step_timeout,
                                 [&] { return entries_ >= target_ || !error_.empty(); });
  if (!error_.empty()) return Internal("step " + std::to_string(step) + ": " + error_);
  if (!done) {
    return DeadlineExceeded("step " + std::to_string(step) + ": " +
                            std::to_string(target_ - entries_) + " plan entries missing after " +
                            std::to_string(options_.step_timeout.count()) + " ms");
  }
  for (int r = 0; r < n; ++r) HORA_RETURN_IF_ERROR(sinks_[r]->checker.EndStep(r, step));
  return Status::Ok();
}

Status SimulatedRanks::CheckSameOrder() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (int r = 1; r < options_.ranks; ++r) {
    if (sinks_[r]->checker.hash() != sinks_[0]->checker.hash()) {
      return Internal("rank " + std::to_string(r) + " saw a different bucket order than rank 0");
    }
  }
  return Status::Ok();
}

void SimulatedRanks::Close() {
  const int n = static_cast<int>(clients_.size());
  ForEachParallel(n, std::min(n, 64), [&](int r) {
    if (clients_[r]) clients_[r]->Close();
  });
}

void SimulatedRanks::ResetCounters() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& s : sinks_) s->messages = s->bytes = s->buckets = 0;
}

double SimulatedRanks::messages_out() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t m = 0;
  for (const auto& s : sinks_) m += s->messages;
  return static_cast<double>(m);
}

double SimulatedRanks::bytes_out() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<double>(sinks_[0]->bytes) * options_.ranks;
}

double SimulatedRanks::buckets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<double>(sinks_[0]->buckets);
}

int64_t SimulatedRanks::MessagesInPerStep() const {
  const int per_rank = static_cast<int>(NoticeChunks(options_).size());
  return static_cast<int64_t>(per_rank) * options_.ranks;
}

double SimulatedRanks::BytesInPerStep() const {
  int64_t bytes = 0;
  for (const auto& [begin, end] : NoticeChunks(options_)) {
    proto::WorkerMessage message;
    for (const ReadyNotice& n : Notices(begin, end, false)) {
      ToProto(n, message.mutable_ready()->add_tensors());
    }
    bytes += static_cast<int64_t>(message.ByteSizeLong());
  }
  return static_cast<double>(bytes) * options_.ranks;
}

}  // namespace scale_bench
}  // namespace hora
