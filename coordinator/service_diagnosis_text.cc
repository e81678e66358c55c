// The diagnosis text (service_diagnosis.h).
#include <algorithm>

#include "coordinator/core.h"
#include "coordinator/service_diagnosis.h"

namespace hora {
namespace {

using std::chrono::milliseconds;

constexpr size_t kMaxStalls = 4;   // stalled operations named in the summary
constexpr size_t kMaxMissing = 8;  // missing ranks named per stalled operation

// What the rank is doing, from its report: "it is in f (a.py:3) <- g (a.py:9)".
std::string StateOf(const DiagnosisInput& in, int rank) {
  if (in.lost[rank]) return "it is lost (no longer connected to the coordinator)";
  const std::optional<DiagnosisReport>& r = in.reports[rank];
  if (!r) {
    return "it did not answer the diagnosis within " + FormatSeconds(in.deadline) +
           " (Hora's own threads are stuck, or the process is stopped)";
  }
  std::string s;
  switch (r->python) {
    case DiagnosisReport::Python::kAnswered:
      s = r->where.empty() ? "its main Python thread shows no frame outside Hora"
                           : "it is in " + r->where;
      break;
    case DiagnosisReport::Python::kSilent:
      s = "it is wedged outside Python: its Python threads did not answer within " +
          FormatSeconds(r->python_wait) +
          " (a C call that holds the GIL, or a deadlock); its last completed operation was " +
          (r->last_completed.empty() ? "none" : r->last_completed);
      break;
    case DiagnosisReport::Python::kNone:
      s = "it runs no Python (no stack to show); its last completed operation was " +
          (r->last_completed.empty() ? "none" : r->last_completed);
      break;
  }
  return s;
}

std::string RanksPhrase(const std::vector<int>& ranks) {
  return std::string(ranks.size() == 1 ? "rank " : "ranks ") + JoinRanks(ranks, 8) +
         (ranks.size() == 1 ? " has" : " have");
}

}  // namespace

DiagnosisText ComposeDiagnosis(const DiagnosisInput& in) {
  const int size = static_cast<int>(in.ranks.size());
  std::string summary = "diagnosis (" + in.reason + "):";
  if (!in.stalls.empty()) {
    for (size_t i = 0; i < in.stalls.size() && i < kMaxStalls; ++i) {
      const StallReport& st = in.stalls[i];
      const std::string op = std::string(CollectiveName(st.collective)) + " " + st.name;
      for (size_t j = 0; j < st.missing_ranks.size() && j < kMaxMissing; ++j) {
        const int rank = st.missing_ranks[j];
        summary += "\n  " + in.ranks[rank] + " never submitted " + op + ": " + StateOf(in, rank) +
                   "; " + RanksPhrase(st.ready_ranks) + " waited for it in " + op + " for " +
                   FormatSeconds(std::chrono::duration_cast<milliseconds>(st.age));
      }
      if (st.missing_ranks.size() > kMaxMissing) {
        summary += "\n  ... and " + std::to_string(st.missing_ranks.size() - kMaxMissing) +
                   " more ranks never submitted " + op;
      }
    }
    if (in.stalls.size() > kMaxStalls) {
      summary += "\n  ... and " + std::to_string(in.stalls.size() - kMaxStalls) +
                 " more stalled operations (see the full report)";
    }
  }
  if (in.stalls.empty() || in.every_rank) {
    for (int rank = 0; rank < size; ++rank) {
      std::string line = "\n  " + in.ranks[rank] + ": ";
      const std::optional<DiagnosisReport>& r = in.reports[rank];
      if (r && !in.lost[rank]) {
        line += r->pending.empty()
                    ? "nothing pending"
                    : std::to_string(r->pending.size()) + " pending (" + r->pending.front() +
                          (r->pending.size() > 1 ? ", ..." : "") + ")";
        line += "; ";
      }
      summary += line + StateOf(in, rank);
    }
  }
  std::string full = summary + "\n";
  for (int rank = 0; rank < size; ++rank) {
    full += "\n== " + in.ranks[rank] + " ==\n";
    const std::optional<DiagnosisReport>& r = in.reports[rank];
    if (!r) {
      full += StateOf(in, rank) + "\n";
      continue;
    }
    full += "pending: " + std::to_string(r->pending.size()) + "\n";
    for (const std::string& p : r->pending) full += "  " + p + "\n";
    full += "last completed: " + (r->last_completed.empty() ? "none" : r->last_completed) + "\n";
    full += r->detail;
    if (!r->detail.empty() && r->detail.back() != '\n') full += "\n";
  }
  return DiagnosisText{std::move(summary), std::move(full)};
}

}  // namespace hora
