// CoordinatorCore: start, shutdown and small helpers. The handlers live in service_join.cc,
// store.cc and session.cc; the timer and sender threads in service_liveness.cc.
#include <algorithm>
#include <cstdio>

#include "common/logging.h"
#include "common/mutex.h"
#include "common/thread_name.h"
#include "coordinator/core.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

milliseconds StallCheckInterval(const CoordinatorConfig& c) {
  milliseconds interval = c.stall_warning / 2;
  if (c.stall_timeout > milliseconds(0)) interval = std::min(interval, c.stall_timeout / 4);
  return std::max(interval, milliseconds(10));
}

}  // namespace

CoordinatorCore::CoordinatorCore(const CoordinatorConfig& config)
    : config_(config),
      start_time_(Clock::now()),
      start_deadline_(start_time_ + config.start_timeout),
      stall_check_interval_(StallCheckInterval(config)),
      ranks_(config.size) {
  std::vector<int> everyone(config.size);
  for (int r = 0; r < config.size; ++r) everyone[r] = r;
  if (config_.autotune.enabled) tuner_ = std::make_unique<Autotuner>(config_.autotune);
  AddSetLocked(kGlobalProcessSet, std::move(everyone), "");
  next_heartbeat_ = start_time_ + config_.heartbeat_interval;
  next_stall_check_ = start_time_ + stall_check_interval_;
}

CoordinatorCore::~CoordinatorCore() {
  Drain("the coordinator was destroyed", milliseconds(0));
  StopThreads();
}

void CoordinatorCore::Start() {
  timer_thread_ = std::thread([this] {
    SetThreadName("hora-coord-time");
    TimerLoop();
  });
  sender_thread_ = std::thread([this] {
    SetThreadName("hora-coord-send");
    SenderLoop();
  });
}

void CoordinatorCore::Drain(const std::string& reason, milliseconds drain) {
  {
    MutexLock lock(&mu_);
    if (shutting_down_) return;
    // A diagnosis in progress (a rank was lost, and this rank is shutting down because of it)
    // gets the rest of its deadline, so that its report is written.
    if (diagnosis_) {
      sessions_cv_.WaitUntil(&mu_, diagnosis_->deadline, [this] {
        mu_.AssertHeld();
        return !diagnosis_.has_value();
      });
      FinishDiagnosisLocked();
    }
    // Drain: ranks still working (or still opening their session after a join that just
    // completed) may finish and say Goodbye; new sessions are still accepted meanwhile.
    sessions_cv_.WaitUntil(&mu_, Clock::now() + drain, [this] {
      mu_.AssertHeld();
      return DrainedLocked();
    });
    shutting_down_ = true;
    join_cv_.NotifyAll();
    if (!DrainedLocked()) AbortLocked(Code::kAborted, reason, -1);
    // Let the sender thread deliver the aborts before the calls are cancelled (bounded).
    sender_cv_.WaitUntil(&mu_, Clock::now() + milliseconds(500), [this] {
      mu_.AssertHeld();
      return flush_queue_.empty() && !sender_busy_;
    });
  }
  MutexLock lock(&store_mu_);
  store_closed_ = true;
  store_cv_.NotifyAll();
}

void CoordinatorCore::StopThreads() {
  {
    MutexLock lock(&mu_);
    stop_threads_ = true;
    timer_cv_.NotifyAll();
    sender_cv_.NotifyAll();
  }
  if (timer_thread_.joinable()) timer_thread_.join();
  if (sender_thread_.joinable()) sender_thread_.join();
}

bool CoordinatorCore::DrainedLocked() const {
  for (const RankState& r : ranks_) {
    if (r.session) return false;
    if (topology_ready_ && r.joined && !r.had_session && !r.lost && !aborted_) return false;
  }
  return true;
}

std::string FormatSeconds(milliseconds d) {
  char buf[32];
  if (d.count() % 1000 == 0) {
    std::snprintf(buf, sizeof(buf), "%lld s", static_cast<long long>(d.count() / 1000));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f s", static_cast<double>(d.count()) / 1000.0);
  }
  return buf;
}

std::string JoinRanks(const std::vector<int>& ranks, size_t cap) {
  std::string s;
  for (size_t i = 0; i < ranks.size() && i < cap; ++i) {
    if (i > 0) s += ",";
    s += std::to_string(ranks[i]);
  }
  if (ranks.size() > cap) s += ",... (" + std::to_string(ranks.size() - cap) + " more)";
  return s;
}

}  // namespace hora
