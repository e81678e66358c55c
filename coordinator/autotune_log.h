// The autotuner's CSV log, for a person and for `hora-timeline autotune-plot`.
//
// Header, then one row per trial in the order measured:
//   trial,stage,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_s,samples,chosen
// stage is 1 (fusion threshold sweep) or 2 (cycle time sweep); chosen is 1 on exactly one row
// once the search is done (0 everywhere before).
#ifndef HORA_COORDINATOR_AUTOTUNE_LOG_H_
#define HORA_COORDINATOR_AUTOTUNE_LOG_H_

#include <string>
#include <vector>

#include "common/status.h"
#include "coordinator/autotune_search.h"

namespace hora {

std::string FormatAutotuneCsv(const std::vector<TrialResult>& trials);

// Replaces `path` with the CSV (written to path + ".tmp", then renamed, so a reader never sees
// half a file). Errors name the path and errno's text.
Status WriteAutotuneLog(const std::string& path, const std::vector<TrialResult>& trials);

}  // namespace hora

#endif  // HORA_COORDINATOR_AUTOTUNE_LOG_H_
