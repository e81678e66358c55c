#include "coordinator/autotune_log.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

namespace hora {

std::string FormatAutotuneCsv(const std::vector<TrialResult>& trials) {
  std::ostringstream s;
  s << "trial,stage,fusion_threshold_bytes,cycle_time_ms,score_bytes_per_s,samples,chosen\n";
  for (size_t i = 0; i < trials.size(); ++i) {
    const TrialResult& t = trials[i];
    char score[64];
    std::snprintf(score, sizeof(score), "%.0f", t.score);
    char cycle[64];
    std::snprintf(cycle, sizeof(cycle), "%g", static_cast<double>(t.point.cycle_time_us) / 1000.0);
    s << i << "," << t.stage << "," << t.point.fusion_threshold_bytes << "," << cycle << ","
      << score << "," << t.samples << "," << (t.chosen ? 1 : 0) << "\n";
  }
  return s.str();
}

Status WriteAutotuneLog(const std::string& path, const std::vector<TrialResult>& trials) {
  const std::string tmp = path + ".tmp";
  const std::string text = FormatAutotuneCsv(trials);
  std::FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    return Status(Code::kInvalidArgument,
                  "autotune log '" + tmp + "' cannot be opened: " + std::strerror(errno));
  }
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const int saved = errno;
  if (std::fclose(f) != 0 || !written) {
    return Status(Code::kInternal, "autotune log '" + tmp + "' could not be written: " +
                                       std::strerror(written ? errno : saved));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status(Code::kInternal, "autotune log '" + tmp + "' could not be renamed to '" + path +
                                       "': " + std::strerror(errno));
  }
  return Status::Ok();
}

}  // namespace hora
