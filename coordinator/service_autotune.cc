// The autotuner at the coordinator. Every bucket a planner emits is shown to the Autotuner
// (coordinator/autotuner.h), which scores trials by bytes reduced per second. When it moves
// to the next trial, or ends with the chosen point, every planner gets the new fusion
// threshold and cycle time, every rank gets a Tuning message (so each can report the
// settings; no rank uses them, so the choice is the same everywhere by construction), and the
// CSV log is rewritten (a person can read it mid-run; the chosen row is marked at the end).
#include "common/logging.h"
#include "coordinator/autotune_log.h"
#include "coordinator/core.h"

namespace hora {

void CoordinatorCore::ObserveTuningLocked(const PlannerOutput& out, TimePoint now,
                                          Touched* touched) {
  bool changed = false;
  for (const PlannedBucket& b : out.buckets) changed = tuner_->Observe(b, now) || changed;
  if (!changed) return;
  const TuningPoint p = tuner_->Current();
  for (auto& [id, set] : sets_) {
    set.planner->SetTuning(p.fusion_threshold_bytes, std::chrono::microseconds(p.cycle_time_us));
  }
  const TrialResult& last = tuner_->trials().back();
  HORA_LOG_INFO("autotune: trial {} (fusion_threshold={} cycle_time_ms={}) scored {:.0f} bytes/s",
                tuner_->trials().size() - 1, last.point.fusion_threshold_bytes,
                last.point.cycle_time_us / 1000.0, last.score);
  if (tuner_->Done()) {
    HORA_LOG_INFO("autotune: done after {} trials: fusion_threshold={} cycle_time_ms={}",
                  tuner_->trials().size(), p.fusion_threshold_bytes, p.cycle_time_us / 1000.0);
  }
  if (!config_.autotune.log_path.empty()) {
    Status s = WriteAutotuneLog(config_.autotune.log_path, tuner_->trials());
    if (!s.ok()) HORA_LOG_WARN("HORA_AUTOTUNE_LOG: {}", s.message());
  }
  SendTuningLocked(touched);
}

void CoordinatorCore::SendTuningLocked(Touched* touched) {
  const TuningPoint p = tuner_->Current();
  for (RankState& r : ranks_) {
    if (!r.session) continue;
    CoordinatorMessage message;
    message.kind = CoordinatorMessage::Kind::kTuning;
    message.tuning =
        TuningNotice{p.fusion_threshold_bytes, p.cycle_time_us, tuner_->trial(), tuner_->Done()};
    r.session->Push(std::move(message));
    touched->Add(r.session);
  }
}

}  // namespace hora
