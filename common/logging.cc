#include "common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <mutex>

namespace hora {
namespace {

std::once_flag g_sink_once;

void EnsureLogger() {
  std::call_once(g_sink_once, [] {
    auto logger = spdlog::stderr_logger_mt("hora");
    spdlog::set_default_logger(logger);
    spdlog::set_pattern("[hora] [%l] %v");
    spdlog::set_level(spdlog::level::warn);
  });
}

}  // namespace

bool ParseLogLevel(const std::string& name, spdlog::level::level_enum* level) {
  static const struct {
    const char* name;
    spdlog::level::level_enum level;
  } kLevels[] = {
      {"trace", spdlog::level::trace},    {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},      {"warning", spdlog::level::warn},
      {"warn", spdlog::level::warn},      {"error", spdlog::level::err},
      {"fatal", spdlog::level::critical}, {"critical", spdlog::level::critical},
      {"off", spdlog::level::off},
  };
  std::string lower;
  for (char c : name) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& l : kLevels) {
    if (lower == l.name) {
      *level = l.level;
      return true;
    }
  }
  return false;
}

void SetLogLevel(spdlog::level::level_enum level) {
  EnsureLogger();
  spdlog::set_level(level);
}

void SetLogRank(int rank) {
  EnsureLogger();
  spdlog::set_pattern("[hora " + std::to_string(rank) + "] [%l] %v");
}

}  // namespace hora
