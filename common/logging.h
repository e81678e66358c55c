// Logging through spdlog. Every line carries the rank: "[hora 3] [warn] ...".
// SetLogRank and SetLogLevel are called once by the Engine at start (the level comes from
// HORA_LOG_LEVEL through runtime/options); both are thread-safe.
#ifndef HORA_COMMON_LOGGING_H_
#define HORA_COMMON_LOGGING_H_

#include <spdlog/spdlog.h>

#include <string>

#include "common/status.h"

namespace hora {

// Level names: trace, debug, info, warning (or warn), error, fatal (or critical), off.
bool ParseLogLevel(const std::string& name, spdlog::level::level_enum* level);
void SetLogLevel(spdlog::level::level_enum level);
void SetLogRank(int rank);

}  // namespace hora

#define HORA_LOG_TRACE(...) SPDLOG_TRACE(__VA_ARGS__)
#define HORA_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
#define HORA_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define HORA_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define HORA_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)

// A broken internal invariant: log and abort. Never for bad input (that is a Status).
#define HORA_CHECK(cond)                                                          \
  do {                                                                            \
    if (!(cond)) {                                                                \
      ::spdlog::critical("check failed at {}:{}: {}", __FILE__, __LINE__, #cond); \
      ::spdlog::default_logger()->flush();                                        \
      std::abort();                                                               \
    }                                                                             \
  } while (0)

#endif  // HORA_COMMON_LOGGING_H_
