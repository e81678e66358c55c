// Internal to coordinator/: the text of a diagnosis, from the stalls and the ranks' reports.
// Pure (plain structs in, text out), so tests feed it tables; the round that gathers the
// reports is in service_diagnose.cc.
#ifndef HORA_COORDINATOR_SERVICE_DIAGNOSIS_H_
#define HORA_COORDINATOR_SERVICE_DIAGNOSIS_H_

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "coordinator/messages.h"
#include "coordinator/planner.h"

namespace hora {

struct DiagnosisInput {
  std::string reason;               // "stall timeout", "asked by rank 2 (SIGUSR1)", ...
  std::vector<StallReport> stalls;  // global ranks; names as DescribeTensor writes them
  bool every_rank = false;          // a line per rank too, even with stalls
  std::vector<std::string> ranks;   // per rank: "rank 1 (host h2, pid 4711)"
  std::vector<bool> lost;           // per rank: declared lost (not asked)
  std::vector<std::optional<DiagnosisReport>> reports;  // per rank; nullopt: no answer
  std::chrono::milliseconds deadline{0};                // how long the round waited
};

struct DiagnosisText {
  // The one message: a first line naming the reason, then one line per rank that did not
  // submit a stalled operation (when there are stalls), else one line per rank.
  std::string summary;
  // The summary, then every rank's whole report (its stacks, its ring, Hora's threads).
  std::string full;
};

DiagnosisText ComposeDiagnosis(const DiagnosisInput& in);

}  // namespace hora

#endif  // HORA_COORDINATOR_SERVICE_DIAGNOSIS_H_
