#include "runtime/options.h"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>

#include "collectives/registry.h"
#include "common/logging.h"
#include "runtime/env_aliases.h"

extern char** environ;

namespace hora {
namespace {

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
  auto launch = DetectLaunchEnv(env);
  if (!launch.ok()) return launch.status();
  o->launch = std::move(launch).value();
  o->rank = o->launch.rank;
  o->size = o->launch.size;
  if (ov.size >= 0) o->size = ov.size;
  if (ov.rank >= 0) o->rank = ov.rank;
  if (o->size < 1)
    return InvalidArgument("size " + std::to_string(o->size) + " must be at least 1");
  if (o->rank >= o->size) {
    return InvalidArgument("rank " + std::to_string(o->rank) + " is out of range for size " +
                           std::to_string(o->size));
  }
  return Status::Ok();
}

// Why no address could be chosen, for the launcher that started us.
std::string NoAddressReason(const LaunchEnv& l) {
  const std::string unset = std::string(kEnvCoordinatorAddr) + " is not set";
  switch (l.launcher) {
    case Launcher::kOpenMpi:
      return unset +
             " and Open MPI gave no PMIx namespace (PMIX_NAMESPACE) to publish rank 0's "
             "address through: set it (host:port of rank 0) on every rank (mpirun -x)";
    case Launcher::kTorchrun:
      return unset +
             " and neither is MASTER_ADDR (torchrun sets it): set one of them on every rank";
    case Launcher::kSlurm:
      return unset + " and no Slurm node list (SLURM_STEP_NODELIST, SLURM_JOB_NODELIST) is: set " +
             kEnvCoordinatorAddr + " on every rank";
    default:
      return unset + ": start the job with horarun, or set it (host:port of rank 0) on every rank";
  }
}

Status ParseAddress(const EnvLookup& env, const OptionOverrides& ov, Options* o) {
  if (const char* i = env(kEnvCoordinatorIface); i != nullptr) o->coordinator_iface = i;
  const char* given = env(kEnvCoordinatorAddr);
  if (!ov.coordinator_address.empty()) {
    o->coordinator_address = ov.coordinator_address;
  } else if (given != nullptr && *given != '\0') {
    o->coordinator_address = given;
  } else if (o->size == 1) {
    o->coordinator_address = "127.0.0.1:0";
  } else if (!o->launch.coordinator_address.empty()) {
    o->coordinator_address = o->launch.coordinator_address;
    o->coordinator_listen_any = o->launch.listen_any;
  } else if (o->launch.address_through_pmix) {
    o->coordinator_exchange = "pmix";
    o->coordinator_listen_port = o->launch.listen_port;
    return Status::Ok();
  } else {
    return InvalidArgument(NoAddressReason(o->launch));
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

// An integer knob under its Hora name or its Horovod alias (the Hora one wins).
Status ParseCount(const EnvLookup& env, std::initializer_list<const char*> names, int64_t lo,
                  int64_t hi, int* out) {
  const char* which = nullptr;
  const char* v = FirstSet(env, names, &which);
  if (v == nullptr || *v == '\0') return Status::Ok();
  int64_t parsed = 0;
  HORA_RETURN_IF_ERROR(ParseInt(which, v, lo, hi, &parsed));
  *out = static_cast<int>(parsed);
  return Status::Ok();
}

// A boolean variable's value: 1 or true, 0 or false; anything else names the variable.
Status ParseBool(const char* name, const std::string& s, bool* out) {
  if (s != "0" && s != "1" && s != "true" && s != "false") {
    return InvalidArgument(std::string(name) + "='" + s + "' is not 0, 1, true or false");
  }
  *out = s == "1" || s == "true";
  return Status::Ok();
}

// A flag under its Hora name or its Horovod alias; unset or empty leaves it.
Status ParseFlag(const EnvLookup& env, std::initializer_list<const char*> names, bool* out) {
  const char* which = nullptr;
  const char* v = FirstSet(env, names, &which);
  if (v == nullptr || *v == '\0') return Status::Ok();
  return ParseBool(which, v, out);
}

// HORA_HIERARCHICAL_ALLREDUCE / HOROVOD_HIERARCHICAL_ALLREDUCE: 1 takes the hierarchical
// backend for every set it can serve, 0 never lets "auto" take it. The knob names that
// backend, so this is the one place above collectives/ that spells it; it only rewrites the
// selection string, which the registry interprets. An explicitly named backend wins.
Status ParseHierarchical(const EnvLookup& env, Options* o) {
  const char* which = nullptr;
  const char* v =
      FirstSet(env, {kEnvHierarchicalAllreduce, kEnvHorovodHierarchicalAllreduce}, &which);
  if (v == nullptr || *v == '\0') return Status::Ok();
  bool on = false;
  HORA_RETURN_IF_ERROR(ParseBool(which, v, &on));
  if (o->cpu_operations == "auto") {
    o->cpu_operations = on ? "prefer:hierarchical" : "avoid:hierarchical";
  }
  return Status::Ok();
}

Status ParseDiagnosis(const EnvLookup& env, Options* o);

Status ParseAutotune(const EnvLookup& env, Options* o) {
  const char* which = nullptr;
  HORA_RETURN_IF_ERROR(ParseFlag(env, {kEnvAutotune, kEnvHorovodAutotune}, &o->autotune));
  if (const char* v = FirstSet(env, {kEnvAutotuneLog, kEnvHorovodAutotuneLog}, &which)) {
    o->autotune_log = v;
  }
  HORA_RETURN_IF_ERROR(ParseCount(env,
                                  {kEnvAutotuneWarmupSamples, kEnvHorovodAutotuneWarmupSamples}, 0,
                                  1000000, &o->autotune_warmup_samples));
  HORA_RETURN_IF_ERROR(ParseCount(env,
                                  {kEnvAutotuneStepsPerSample, kEnvHorovodAutotuneStepsPerSample},
                                  1, 1000000, &o->autotune_steps_per_sample));
  HORA_RETURN_IF_ERROR(
      ParseCount(env, {kEnvAutotuneSamplesPerTrial}, 1, 1000000, &o->autotune_samples_per_trial));
  return Status::Ok();
}

Status ParseRest(const EnvLookup& env, Options* o) {
  if (const char* v = env(kEnvFusionThreshold); v != nullptr && *v != '\0') {
    HORA_RETURN_IF_ERROR(
        ParseInt(kEnvFusionThreshold, v, 0, 1ll << 40, &o->fusion_threshold_bytes));
    o->fusion_threshold_set = true;
  }
  if (const char* v = env(kEnvCycleTimeMs); v != nullptr && *v != '\0') o->cycle_time_set = true;
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
  if (const char* v = env(kEnvSteady); v != nullptr && *v != '\0') {
    const std::string s = v;
    if (s != "auto" && s != "on" && s != "off") {
      return InvalidArgument(std::string(kEnvSteady) + "='" + s + "' is not one of auto, on, off");
    }
    o->steady = s;
  }
  if (const char* v = env(kEnvHostRelay); v != nullptr && *v != '\0') {
    const std::string s = v;
    if (s != "auto" && s != "on" && s != "off") {
      return InvalidArgument(std::string(kEnvHostRelay) + "='" + s +
                             "' is not one of auto, on, off");
    }
    o->host_relay = s;
  }
  if (const char* v = env(kEnvSteadyPatienceMs); v != nullptr && *v != '\0') {
    HORA_RETURN_IF_ERROR(ParseInt(kEnvSteadyPatienceMs, v, 1, 3600 * 1000, &o->steady_patience_ms));
  }
  if (const char* v = env(kEnvDeterministic); v != nullptr && *v != '\0') {
    HORA_RETURN_IF_ERROR(ParseBool(kEnvDeterministic, v, &o->deterministic));
  }
  HORA_RETURN_IF_ERROR(ParseHierarchical(env, o));
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
  HORA_RETURN_IF_ERROR(ParseFlag(env, {kEnvTimelineMarkCycles, kEnvHorovodTimelineMarkCycles},
                                 &o->timeline_mark_cycles));
  HORA_RETURN_IF_ERROR(ParseAutotune(env, o));
  HORA_RETURN_IF_ERROR(ParseDiagnosis(env, o));
  if (o->tls_cert.empty() != o->tls_key.empty()) {
    return InvalidArgument(std::string(kEnvTlsCert) + " and " + kEnvTlsKey +
                           " must be set together");
  }
  return Status::Ok();
}

Status ParseDiagnosis(const EnvLookup& env, Options* o) {
  if (const char* v = env(kEnvFlightRecorderSize); v != nullptr && *v != '\0') {
    HORA_RETURN_IF_ERROR(ParseInt(kEnvFlightRecorderSize, v, 0, 1 << 20, &o->flight_recorder_size));
  }
  HORA_RETURN_IF_ERROR(ParseSeconds(env, kEnvDiagnoseSeconds, true, &o->diagnose_s));
  if (const char* v = env(kEnvDiagnoseFile); v != nullptr) o->diagnose_file = v;
  if (const char* v = env(kEnvDiagnoseSignal); v != nullptr && *v != '\0') {
    const std::string s = v;
    if (s == "0" || s == "off" || s == "none") {
      o->diagnose_signal = 0;
    } else if (s == "10" || s == "USR1" || s == "SIGUSR1") {
      o->diagnose_signal = 10;
    } else if (s == "12" || s == "USR2" || s == "SIGUSR2") {
      o->diagnose_signal = 12;
    } else {
      return InvalidArgument(std::string(kEnvDiagnoseSignal) + "='" + s +
                             "' is not SIGUSR1 (10), SIGUSR2 (12) or 0 (none)");
    }
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
  if (!o->launch.token.empty()) {
    o->token = o->launch.token;
    return Status::Ok();
  }
  // A launcher that gave none (horarun's variables set by hand inside another launcher's job):
  // any job id in sight.
  const char* which = nullptr;
  if (const char* id = FirstSet(
          env, {"PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"},
          &which)) {
    o->token = std::string(which) + "=" + id;
    const char* step = env("SLURM_STEP_ID");
    if (std::string(which) == "SLURM_JOB_ID" && step != nullptr)
      o->token += "." + std::string(step);
    return Status::Ok();
  }
  if (o->size == 1) {
    std::random_device rd;
    o->token = std::to_string(rd()) + std::to_string(rd());
    return Status::Ok();
  }
  return InvalidArgument(
      std::string(kEnvJobToken) +
      " is not set: start the job with horarun, or set the same secret on every rank");
}

}  // namespace

StatusOr<Options> ParseOptions(const EnvLookup& raw_env, const OptionOverrides& overrides) {
  Options o;
  std::vector<std::string> notes;
  const EnvLookup env = WithHorovodAliases(raw_env, &notes);
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
  if (overrides.deterministic >= 0) o.deterministic = overrides.deterministic != 0;
  o.env_notes = std::move(notes);
  return o;
}

EnvLookup ProcessEnvironment() {
  return [](const char* name) { return std::getenv(name); };
}

StatusOr<Options> OptionsFromEnvironment(const OptionOverrides& overrides) {
  auto o = ParseOptions(ProcessEnvironment(), overrides);
  if (!o.ok()) return o;
  auto environment = std::make_shared<std::map<std::string, std::string>>();
  std::vector<std::string> names;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq == nullptr) continue;
    names.emplace_back(*e, eq - *e);
    environment->emplace(names.back(), eq + 1);
  }
  o.value().env_warnings = UnknownHoraVariables(names);
  o.value().environment = std::move(environment);
  return o;
}

std::string Options::Digest() const {
  std::ostringstream s;
  s << "fusion_threshold=" << fusion_threshold_bytes
    << ";inline_threshold=" << inline_threshold_bytes << ";cpu_operations=" << cpu_operations
    << ";gpu_operations=" << gpu_operations << ";steady=" << steady
    << ";deterministic=" << deterministic << ";host_relay=" << host_relay;
  return s.str();
}

std::string Options::Describe() const {
  std::ostringstream s;
  s << "rank " << rank << "/" << size << " (launcher " << LauncherName(launch.launcher) << ") host "
    << hostname << " coordinator "
    << (coordinator_exchange.empty() ? coordinator_address : "through " + coordinator_exchange)
    << " fusion_threshold=" << fusion_threshold_bytes << " cycle_time_ms=" << cycle_time_ms
    << " inline_threshold=" << inline_threshold_bytes << " start_timeout_s=" << start_timeout_s
    << " heartbeat=" << heartbeat_interval_s << "/" << heartbeat_timeout_s
    << "s collective_timeout_s=" << collective_timeout_s << " stall_warning_s=" << stall_warning_s
    << " stall_timeout_s=" << stall_timeout_s << " diagnose_s=" << diagnose_s
    << " flight_recorder=" << flight_recorder_size << " cpu_operations=" << cpu_operations
    << " steady=" << steady << " steady_patience_ms=" << steady_patience_ms
    << " host_relay=" << host_relay << " deterministic=" << (deterministic ? "on" : "off")
    << " gpu_operations=" << gpu_operations << " tls=" << (tls_cert.empty() ? "off" : "on")
    << " timeline=" << (timeline.empty() ? "off" : timeline)
    << (timeline_mark_cycles ? " (cycles marked)" : "")
    << " autotune=" << (autotune ? "on" : "off");
  if (autotune) {
    s << " (log=" << (autotune_log.empty() ? "none" : autotune_log)
      << " warmup_samples=" << autotune_warmup_samples
      << " steps_per_sample=" << autotune_steps_per_sample
      << " samples_per_trial=" << autotune_samples_per_trial << ")";
  }
  return s.str();
}

}  // namespace hora
