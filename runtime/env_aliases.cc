#include "runtime/env_aliases.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "common/mutex.h"

namespace hora {
namespace {

enum class Convert { kSame, kLower, kDisableStall };

struct Alias {
  const char* horovod;
  const char* hora;  // nullptr: accepted, has no effect in Hora (the note says why)
  Convert convert;
  const char* why_none;
};

// Horovod's variables (horovod/common/common.h, docs) and what each means in Hora.
constexpr Alias kAliases[] = {
    {"HOROVOD_FUSION_THRESHOLD", "HORA_FUSION_THRESHOLD", Convert::kSame, nullptr},
    {"HOROVOD_CYCLE_TIME", "HORA_CYCLE_TIME_MS", Convert::kSame, nullptr},
    {"HOROVOD_STALL_CHECK_TIME_SECONDS", "HORA_STALL_WARNING_SECONDS", Convert::kSame, nullptr},
    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "HORA_STALL_TIMEOUT_SECONDS", Convert::kSame, nullptr},
    {"HOROVOD_STALL_CHECK_DISABLE", "HORA_STALL_WARNING_SECONDS", Convert::kDisableStall, nullptr},
    {"HOROVOD_LOG_LEVEL", "HORA_LOG_LEVEL", Convert::kLower, nullptr},
    {"HOROVOD_GLOO_TIMEOUT_SECONDS", "HORA_COLLECTIVE_TIMEOUT_SECONDS", Convert::kSame, nullptr},
    {"HOROVOD_CPU_OPERATIONS", "HORA_CPU_OPERATIONS", Convert::kLower, nullptr},
    {"HOROVOD_GPU_OPERATIONS", "HORA_GPU_OPERATIONS", Convert::kLower, nullptr},
    {"HOROVOD_GLOO_IFACE", "HORA_GLOO_IFACE", Convert::kSame, nullptr},
    {"HOROVOD_HOSTNAME", "HORA_HOSTNAME", Convert::kSame, nullptr},
    {"HOROVOD_RANK", "HORA_RANK", Convert::kSame, nullptr},
    {"HOROVOD_SIZE", "HORA_SIZE", Convert::kSame, nullptr},
    {"HOROVOD_LOCAL_RANK", "HORA_LOCAL_RANK", Convert::kSame, nullptr},
    {"HOROVOD_LOCAL_SIZE", "HORA_LOCAL_SIZE", Convert::kSame, nullptr},
    {"HOROVOD_CROSS_RANK", "HORA_CROSS_RANK", Convert::kSame, nullptr},
    {"HOROVOD_CROSS_SIZE", "HORA_CROSS_SIZE", Convert::kSame, nullptr},
    {"HOROVOD_CACHE_CAPACITY", nullptr, Convert::kSame,
     "Hora has no response cache to size (plans come from the coordinator)"},
    {"HOROVOD_NUM_NCCL_STREAMS", nullptr, Convert::kSame,
     "Hora's NCCL backend uses one stream per process set and device"},
    {"HOROVOD_MPI_THREADS_DISABLE", nullptr, Convert::kSame,
     "Hora's MPI backend always asks for MPI_THREAD_MULTIPLE"},
};

// Names Hora's runtime, launcher, Python package and tools read besides the options.
constexpr const char* kKnown[] = {
    "HORA_RANK",
    "HORA_SIZE",
    "HORA_LOCAL_RANK",
    "HORA_LOCAL_SIZE",
    "HORA_CROSS_RANK",
    "HORA_CROSS_SIZE",
    "HORA_COORDINATOR_ADDR",
    "HORA_COORDINATOR_IFACE",
    "HORA_COORDINATOR_PORT",
    "HORA_JOB_TOKEN",
    "HORA_HOSTNAME",
    "HORA_FUSION_THRESHOLD",
    "HORA_CYCLE_TIME_MS",
    "HORA_INLINE_THRESHOLD",
    "HORA_START_TIMEOUT_SECONDS",
    "HORA_HEARTBEAT_INTERVAL_SECONDS",
    "HORA_HEARTBEAT_TIMEOUT_SECONDS",
    "HORA_COLLECTIVE_TIMEOUT_SECONDS",
    "HORA_DIAGNOSE_SECONDS",
    "HORA_DIAGNOSE_FILE",
    "HORA_DIAGNOSE_SIGNAL",
    "HORA_FLIGHT_RECORDER_SIZE",
    "HORA_STALL_WARNING_SECONDS",
    "HORA_STALL_TIMEOUT_SECONDS",
    "HORA_LOG_LEVEL",
    "HORA_CPU_OPERATIONS",
    "HORA_STEADY",
    "HORA_STEADY_PATIENCE_MS",
    "HORA_HOST_RELAY",
    "HORA_DETERMINISTIC",
    "HORA_GPU_OPERATIONS",
    "HORA_GLOO_IFACE",
    "HORA_TCP_CHANNELS",
    "HORA_TCP_PIECE_BYTES",
    "HORA_TCP_SMALL_ALLREDUCE_BYTES",
    "HORA_TCP_PAIR_DOUBLING_BYTES",
    "HORA_TCP_SOCKET_BUFFER_BYTES",
    "HORA_TCP_INFLIGHT_BYTES",
    "HORA_TCP_SPIN_US",
    "HORA_HIERARCHICAL_CHUNK_BYTES",
    "HORA_MAX_MESSAGE_BYTES",
    "HORA_TLS_CERT",
    "HORA_TLS_KEY",
    "HORA_TLS_CA",
    "HORA_TIMELINE",
    "HORA_TIMELINE_MARK_CYCLES",
    "HORA_AUTOTUNE",
    "HORA_AUTOTUNE_LOG",
    "HORA_AUTOTUNE_WARMUP_SAMPLES",
    "HORA_AUTOTUNE_STEPS_PER_SAMPLE",
    "HORA_AUTOTUNE_SAMPLES_PER_TRIAL",
    "HORA_HIERARCHICAL_ALLREDUCE",
    // hora.torch, the launcher, tests and tools
    "HORA_LIBRARY",
    "HORA_NCCL_LIBRARY",
    "HORA_ELASTIC_RESET_LIMIT",
    "HORA_ELASTIC_TIMEOUT",
    "HORA_GPU_PYTHON",
    "HORA_GPU_JOB_TIMEOUT",
    "HORA_TEST_EXPECT_GPU",
    "HORA_BUCKET_CAP_MB",
    "HORA_TORCH2",
    "HORA_TEST_PYTHON",
    "HORA_TEST_BIN_ROOT",
    "HORA_TEST_LOG_LEVEL",
    "HORA_BAZEL_ROOT",
    "HORA_MULTIHOST_PREFIX",
    "HORA_MULTIHOST_NET",
    "HORA_KEEP_BAZEL",
    "HORA_PREFIX",
    "HORA_BIN",
    "HORA_BENCH_BIN",
    "HORA_BENCH_EXTRA_X",
};

std::string Lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// What the wrapped lookup remembers: converted values (so their pointers stay valid) and
// which variables have been reported.
struct AliasState {
  Mutex mu;
  std::map<std::string, std::string> values;
  std::set<std::string> reported;
};

}  // namespace

EnvLookup WithHorovodAliases(const EnvLookup& env, std::vector<std::string>* notes) {
  auto state = std::make_shared<AliasState>();
  // Aliases with no Hora meaning are reported up front; they are never asked for.
  for (const Alias& a : kAliases) {
    const char* v = a.hora == nullptr ? env(a.horovod) : nullptr;
    if (v != nullptr && notes != nullptr) {
      notes->push_back(std::string(a.horovod) + "=" + v + " has no effect: " + a.why_none);
    }
  }
  return [env, state, notes](const char* name) -> const char* {
    if (const char* own = env(name); own != nullptr) return own;
    for (const Alias& a : kAliases) {
      if (a.hora == nullptr || std::string(a.hora) != name) continue;
      const char* v = env(a.horovod);
      if (v == nullptr) continue;
      std::string value = v;
      if (a.convert == Convert::kLower) value = Lower(value);
      if (a.convert == Convert::kDisableStall) {
        if (value == "0" || value.empty()) continue;  // checks stay on
        value = "10000000";                           // no warning within 115 days
      }
      MutexLock lock(&state->mu);
      auto it = state->values.insert_or_assign(name, value).first;
      if (notes != nullptr && state->reported.insert(a.horovod).second) {
        notes->push_back(std::string(a.horovod) + "=" + v + " read as " + name + "=" + value);
      }
      return it->second.c_str();
    }
    return nullptr;
  };
}

std::vector<std::string> UnknownHoraVariables(const std::vector<std::string>& names) {
  std::vector<std::string> warnings;
  for (const std::string& name : names) {
    if (name.rfind("HORA_", 0) != 0) continue;
    const char* best = nullptr;
    size_t best_distance = 0;
    bool known = false;
    for (const char* k : kKnown) {
      const size_t d = EditDistance(name, k);
      if (d == 0) {
        known = true;
        break;
      }
      if (best == nullptr || d < best_distance) best = k, best_distance = d;
    }
    if (known) continue;
    std::string w = name + " is not a Hora variable";
    if (best != nullptr && best_distance <= 4) w += std::string(" (did you mean ") + best + "?)";
    warnings.push_back(w + "; it is ignored");
  }
  return warnings;
}

}  // namespace hora
