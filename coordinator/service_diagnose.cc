// The diagnosis round: what every live rank is doing, in one message from rank 0.
//
// A round starts when
//   - a stall warning names operations not diagnosed before (once per operation name),
//   - a stall timeout fires (the abort then waits for the round, so the abort's message and
//     every rank's error carry the diagnosis),
//   - a rank is lost or reports a failure (the abort goes out at once, right after the
//     requests; the survivors answer while they shut down),
//   - a rank asks (DiagnoseAsk: SIGUSR1 to any rank, horarun --diagnose).
// The coordinator sends Diagnose{id, reason, deadline} to every rank with an open session and
// not lost; each answers one DiagnosisReport with that id (runtime/diagnosis_responder.h: its
// pending operations from the flight recorder, its last completed one, the stacks of its
// Python threads, or that they did not answer in half the deadline). The round ends when every
// asked rank answered or at the deadline (HORA_DIAGNOSE_SECONDS), whichever is first; a rank
// that did not answer is named as such. One round at a time: a request during a round joins
// it. The text (service_diagnosis_text.cc) goes to rank 0's log as one message and, whole,
// appended to the job's diagnosis file (HORA_DIAGNOSE_FILE).
#include <cstdio>

#include "common/logging.h"
#include "coordinator/core.h"
#include "coordinator/service_diagnosis.h"

namespace hora {

void CoordinatorCore::StartDiagnosisLocked(const std::string& reason,
                                           std::vector<StallReport> stalls, bool every_rank,
                                           TimePoint now) {
  if (!DiagnosisOn()) return;
  if (diagnosis_) {
    if (!stalls.empty()) diagnosis_->stalls = std::move(stalls);
    diagnosis_->every_rank = diagnosis_->every_rank || every_rank;
    return;
  }
  DiagnosisRound round;
  round.id = next_diagnosis_id_++;
  round.reason = reason;
  round.deadline = now + config_.diagnose_deadline;
  round.stalls = std::move(stalls);
  round.every_rank = every_rank;
  round.reports.resize(config_.size);
  round.awaited.assign(config_.size, false);
  DiagnosisRequest request{round.id, reason, config_.diagnose_deadline};
  for (int i = 0; i < config_.size; ++i) {
    const RankState& r = ranks_[i];
    if (!r.session || r.lost) continue;
    CoordinatorMessage m;
    m.kind = CoordinatorMessage::Kind::kDiagnose;
    m.diagnose = request;
    r.session->Push(std::move(m));
    ScheduleFlushLocked(r.session);
    round.awaited[i] = true;
  }
  diagnosis_ = std::move(round);
  if (diagnosis_->AwaitsNobody()) {
    FinishDiagnosisLocked();
    return;
  }
  WakeTimerLocked(diagnosis_->deadline);
}

void CoordinatorCore::AbortAfterDiagnosisLocked(DiagnosisRound::PendingAbort abort,
                                                const std::string& reason,
                                                std::vector<StallReport> stalls, bool every_rank,
                                                TimePoint now) {
  if (aborted_ || (diagnosis_ && diagnosis_->abort)) return;  // an abort is decided already
  if (!DiagnosisOn()) {
    AbortLocked(abort.code, abort.message, abort.except_rank);
    return;
  }
  StartDiagnosisLocked(reason, std::move(stalls), every_rank, now);
  if (diagnosis_) {
    diagnosis_->abort = std::move(abort);
  } else {  // the round ended at once (nobody to ask): FinishDiagnosisLocked ran without it
    AbortLocked(abort.code, abort.message, abort.except_rank);
  }
}

void CoordinatorCore::HandleDiagnosisLocked(int rank, DiagnosisReport report) {
  if (!diagnosis_ || report.id != diagnosis_->id || diagnosis_->reports[rank]) return;
  diagnosis_->reports[rank] = std::move(report);
  StopAwaitingDiagnosisLocked(rank);
}

void CoordinatorCore::StopAwaitingDiagnosisLocked(int rank) {
  if (!diagnosis_ || !diagnosis_->awaited[rank]) return;
  diagnosis_->awaited[rank] = false;
  if (diagnosis_->AwaitsNobody()) FinishDiagnosisLocked();
}

void CoordinatorCore::FinishDiagnosisLocked() {
  if (!diagnosis_) return;
  DiagnosisRound round = std::move(*diagnosis_);
  diagnosis_.reset();
  sessions_cv_.NotifyAll();  // Shutdown may wait for the round
  DiagnosisInput in;
  in.reason = round.reason;
  in.stalls = std::move(round.stalls);
  in.every_rank = round.every_rank;
  in.reports = std::move(round.reports);
  in.deadline = config_.diagnose_deadline;
  for (int i = 0; i < config_.size; ++i) {
    in.ranks.push_back(DescribeRank(i));
    in.lost.push_back(ranks_[i].lost);
  }
  DiagnosisText text = ComposeDiagnosis(in);
  std::string where;
  if (!config_.diagnose_file.empty()) {
    if (std::FILE* f = std::fopen(config_.diagnose_file.c_str(), "a")) {
      const std::string block = "=== hora diagnosis " + std::to_string(round.id) + " ===\n" +
                                text.full + "=== end of hora diagnosis " +
                                std::to_string(round.id) + " ===\n\n";
      const bool ok = std::fwrite(block.data(), 1, block.size(), f) == block.size();
      where = (std::fclose(f) == 0 && ok) ? "\n  (the whole report: " + config_.diagnose_file + ")"
                                          : "\n  (could not write " + config_.diagnose_file + ")";
    } else {
      where = "\n  (could not open " + config_.diagnose_file + " to write the whole report)";
    }
  }
  HORA_LOG_WARN("coordinator: {}{}", text.summary, where);
  if (config_.on_diagnosis) config_.on_diagnosis(text.summary, text.full);
  if (round.abort) {
    std::string message = round.abort->message;
    if (round.abort->with_summary) {
      // Every rank's error carries the summary, on one line (logged, and raised in Python).
      std::string oneline = text.summary.substr(text.summary.find(':') + 1);
      for (size_t at = oneline.find("\n  "); at != std::string::npos; at = oneline.find("\n  ")) {
        oneline.replace(at, 3, at == 0 ? " " : "; ");
      }
      message += "; diagnosis:" + oneline;
    }
    AbortLocked(round.abort->code, message, round.abort->except_rank);
  }
}

}  // namespace hora
