#include "runtime/options.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>

#include "collectives/registry.h"
#include "common/logging.h"

namespace hora {
namespace {

const char* FirstSet(const EnvLookup& env, std::initializer_list<const char*> names,
                     const char** which) {
  for (const char* n : names) {
    const char* v = env(n);
    if (v != nullptr && *v != '\0') {
      *which = n;
      return v;
    }
  }
  return nullptr;
}

Status ParseInt(const char* name, const char* value, int64_t lo, int64_t hi, int64_t* out) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < lo || v > hi) {
    return InvalidArgument(std::string(name) + "='" + value + "' is not an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = v;
  return Status::Ok();
}

Status ParseSeconds(const EnvLookup& env, const char* name, bool allow_zero, double* out) {
  const char* value = env(name);
  if (value == nullptr || *value == '\0') return Status::Ok();
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(value, &end);
  if (errno != 0 || end == value || *end != '\0' || !std::isfinite(v) || v < 0 ||
      (!allow_zero && v == 0) || v > 1e7) {
    return InvalidArgument(std::string(name) + "='" + value + "' is not a " +
                           (allow_zero ? "non-negative" : "positive") + " number");
  }
  *out = v;
  return Status::Ok();
}

Status ParseIdentity(const EnvLookup& env, const OptionOverrides& ov, Options* o) {
  const char* rank_var = nullptr;
  const char* size_var = nullptr;
  const char* r = FirstSet(env, {kEnvRank, "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"},
                           &rank_var);
  const char* s = FirstSet(env, {kEnvSize, "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS", "WORLD_SIZE"},
                           &size_var);
  int64_t v = 0;
  if (s != nullptr) {
    HORA_RETURN_IF_ERROR(ParseInt(size_var, s, 1, 1 << 20, &v));
    o->size = static_cast<int>(v);
  }
  if (r != nullptr) {
    HORA_RETURN_IF_ERROR(ParseInt(rank_var, r, 0, 1 << 20, &v));
    o->rank = static_cast<int>(v);
  }
  if (ov.size >= 0) o->size = ov.size;
  if (ov.rank >= 0) o->rank = ov.rank;
  if (o->size < 1) return InvalidArgument("size " + std::to_string(o->size) + " must be at least 1");
  if (o->rank >= o->size) {
    return InvalidArgument("rank " + std::to_string(o->rank) + " is out of range for size " +
                           std::to_string(o->size));
  }
  return Status::Ok();
}

Status ParseAddress(const EnvLookup& env, const OptionOverrides& ov, Options* o) {
  if (!ov.coordinator_address.empty()) {
    o->coordinator_address = ov.coordinator_address;
  } else if (const char* a = env(kEnvCoordinatorAddr); a != nullptr && *a != '\0') {
    o->coordinator_address = a;
  } else if (const char* m = env("MASTER_ADDR"); m != nullptr && *m != '\0') {
    const char* p = env("MASTER_PORT");
    o->coordinator_address = std::string(m) + ":" + (p != nullptr ? p : "29500");
  } else if (o->size == 1) {
    o->coordinator_address = "127.0.0.1:0";
  } else {
    return InvalidArgument(std::string(kEnvCoordinatorAddr) +
                           " is not set: start the job with horarun, or set it (host:port of rank 0) "
                           "on every rank");
  }
  auto colon = o->coordinator_address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == o->coordinator_address.size()) {
    return InvalidArgument(std::string(kEnvCoordinatorAddr) + "='" + o->coordinator_address +
                           "' is not of the form host:port");
  }
  int64_t port = 0;
  std::string port_str = o->coordinator_address.substr(colon + 1);
  HORA_RETURN_IF_ERROR(ParseInt("coordinator port", port_str.c_str(), 0, 65535, &port));
  if (port == 0 && o->size > 1) {
    return InvalidArgument(std::string(kEnvCoordinatorAddr) + "='" + o->coordinator_address +
                           "': port 0 only works for a single-rank job");
  }
  return Status::Ok();
}

Status ParseRest(const EnvLookup& env, Options* o) {
  if (const char* v = env(kEnvFusionThreshold); v != nullptr && *v != '\0') {
    HORA_RETURN_IF_ERROR(ParseInt(kEnvFusionThreshold, v, 0, 1ll << 40, &o->fusion_threshold_bytes));
  }
  HORA_RETURN_IF_ERROR(ParseSeconds(env, kEnvCycleTimeMs, true, &o->cycle_time_ms));
  if (const char* v = env(kEnvInlineThreshold); v != nullptr && *v != '\0') {
    HORA_RETURN_IF_ERROR(ParseInt(kEnvInlineThreshold, v, 0, 1 << 20, &o->inline_threshold_bytes));
  }
  HORA_RETURN_IF_ERROR(ParseSeconds(env, kEnvStartTimeout, false, &o->start_timeout_s));
  HORA_RETURN_IF_ERROR(ParseSeconds(env, kEnvHeartbeatTimeout, false, &o->heartbeat_timeout_s));
  if (env(kEnvHeartbeatInterval) == nullptr) {
    o->heartbeat_interval_s = std::min(1.0, o->heartbeat_timeout_s / 4);
  }
  HORA_RETURN_IF_ERROR(ParseSeconds(env, kEnvHeartbeatInterval, false, &o->heartbeat_interval_s));
  if (o->heartbeat_interval_s >= o->heartbeat_timeout_s) {
    return InvalidArgument(std::string(kEnvHeartbeatInterval) + " must be smaller than " +
                           kEnvHeartbeatTimeout);
  }
  HORA_RETURN_IF_ERROR(ParseSeconds(env, kEnvCollectiveTimeout, true, &o->collective_timeout_s));
  if (o->collective_timeout_s == 0) o->collective_timeout_s = o->heartbeat_timeout_s;
  HORA_RETURN_IF_ERROR(ParseSeconds(env, kEnvStallWarning, false, &o->stall_warning_s));
  HORA_RETURN_IF_ERROR(ParseSeconds(env, kEnvStallTimeout, true, &o->stall_timeout_s));
  if (const char* v = env(kEnvLogLevel); v != nullptr && *v != '\0') {
    spdlog::level::level_enum level;
    if (!ParseLogLevel(v, &level)) {
      return InvalidArgument(std::string(kEnvLogLevel) + "='" + v +
                             "' is not one of trace, debug, info, warning, error, fatal, off");
    }
    o->log_level = v;
  }
  if (const char* v = env(kEnvCpuOperations); v != nullptr && *v != '\0') o->cpu_operations = v;
  HORA_RETURN_IF_ERROR(CheckSelection(o->cpu_operations, Device::kCpu, kEnvCpuOperations));
  if (const char* v = env(kEnvGpuOperations); v != nullptr && *v != '\0') o->gpu_operations = v;
  HORA_RETURN_IF_ERROR(CheckSelection(o->gpu_operations, Device::kCuda, kEnvGpuOperations));
  if (const char* v = env(kEnvGlooIface); v != nullptr) o->gloo_iface = v;
  if (const char* v = env(kEnvMaxMessageBytes); v != nullptr && *v != '\0') {
    HORA_RETURN_IF_ERROR(ParseInt(kEnvMaxMessageBytes, v, 4096, 1ll << 30, &o->max_message_bytes));
  }
  if (const char* v = env(kEnvTlsCert); v != nullptr) o->tls_cert = v;
  if (const char* v = env(kEnvTlsKey); v != nullptr) o->tls_key = v;
  if (const char* v = env(kEnvTlsCa); v != nullptr) o->tls_ca = v;
  const char* timeline_var = nullptr;
  if (const char* v = FirstSet(env, {kEnvTimeline, kEnvHorovodTimeline}, &timeline_var)) {
    o->timeline = v;
  }
  if (o->tls_cert.empty() != o->tls_key.empty()) {
    return InvalidArgument(std::string(kEnvTlsCert) + " and " + kEnvTlsKey + " must be set together");
  }
  return Status::Ok();
}

// The job token: given, else derived from the job id of the launcher that started us (every
// rank of the job sees the same one), else random for a single-rank job.
Status ParseToken(const EnvLookup& env, const OptionOverrides& ov, Options* o) {
  if (!ov.token.empty()) {
    o->token = ov.token;
    return Status::Ok();
  }
  if (const char* t = env(kEnvJobToken); t != nullptr && *t != '\0') {
    o->token = t;
    return Status::Ok();
  }
  const char* which = nullptr;
  if (const char* id = FirstSet(env, {"PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "SLURM_JOB_ID",
                                      "TORCHELASTIC_RUN_ID"}, &which)) {
    o->token = std::string(which) + "=" + id;
    const char* step = env("SLURM_STEP_ID");
    if (std::string(which) == "SLURM_JOB_ID" && step != nullptr) o->token += "." + std::string(step);
    return Status::Ok();
  }
  if (o->size == 1) {
    std::random_device rd;
    o->token = std::to_string(rd()) + std::to_string(rd());
    return Status::Ok();
  }
  return InvalidArgument(std::string(kEnvJobToken) +
                         " is not set: start the job with horarun, or set the same secret on every rank");
}

}  // namespace

StatusOr<Options> ParseOptions(const EnvLookup& env, const OptionOverrides& overrides) {
  Options o;
  HORA_RETURN_IF_ERROR(ParseIdentity(env, overrides, &o));
  HORA_RETURN_IF_ERROR(ParseAddress(env, overrides, &o));
  HORA_RETURN_IF_ERROR(ParseToken(env, overrides, &o));
  if (const char* h = env(kEnvHostname); h != nullptr && *h != '\0') {
    o.hostname = h;
  } else {
    char buf[256] = {0};
    gethostname(buf, sizeof(buf) - 1);
    o.hostname = buf;
  }
  HORA_RETURN_IF_ERROR(ParseRest(env, &o));
  return o;
}

StatusOr<Options> OptionsFromEnvironment(const OptionOverrides& overrides) {
  return ParseOptions([](const char* name) { return std::getenv(name); }, overrides);
}

std::string Options::Digest() const {
  std::ostringstream s;
  s << "fusion_threshold=" << fusion_threshold_bytes << ";inline_threshold=" << inline_threshold_bytes
    << ";cpu_operations=" << cpu_operations << ";gpu_operations=" << gpu_operations;
  return s.str();
}

std::string Options::Describe() const {
  std::ostringstream s;
  s << "rank " << rank << "/" << size << " host " << hostname << " coordinator "
    << coordinator_address << " fusion_threshold=" << fusion_threshold_bytes
    << " cycle_time_ms=" << cycle_time_ms << " inline_threshold=" << inline_threshold_bytes << " start_timeout_s=" << start_timeout_s
    << " heartbeat=" << heartbeat_interval_s << "/" << heartbeat_timeout_s
    << "s collective_timeout_s=" << collective_timeout_s << " stall_warning_s=" << stall_warning_s
    << " stall_timeout_s=" << stall_timeout_s << " cpu_operations=" << cpu_operations
    << " gpu_operations=" << gpu_operations
    << " tls=" << (tls_cert.empty() ? "off" : "on")
    << " timeline=" << (timeline.empty() ? "off" : timeline);
  return s.str();
}

}  // namespace hora
