// Every knob of the runtime: one struct with a documented default on each field, read once
// from the environment (HORA_* variables) and the init config, validated, logged at start.
// This is the only place in Hora that reads the environment.
#ifndef HORA_RUNTIME_OPTIONS_H_
#define HORA_RUNTIME_OPTIONS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/limits.h"
#include "common/status.h"
#include "runtime/launch_env.h"

namespace hora {

// Environment variable names.
constexpr const char kEnvRank[] = "HORA_RANK";
constexpr const char kEnvSize[] = "HORA_SIZE";
constexpr const char kEnvCoordinatorAddr[] = "HORA_COORDINATOR_ADDR";
constexpr const char kEnvCoordinatorIface[] = "HORA_COORDINATOR_IFACE";
// HORA_COORDINATOR_PORT: kEnvCoordinatorPort in runtime/launch_env.h, which reads it.
constexpr const char kEnvJobToken[] = "HORA_JOB_TOKEN";
constexpr const char kEnvHostname[] = "HORA_HOSTNAME";
constexpr const char kEnvFusionThreshold[] = "HORA_FUSION_THRESHOLD";
constexpr const char kEnvCycleTimeMs[] = "HORA_CYCLE_TIME_MS";
constexpr const char kEnvInlineThreshold[] = "HORA_INLINE_THRESHOLD";
constexpr const char kEnvStartTimeout[] = "HORA_START_TIMEOUT_SECONDS";
constexpr const char kEnvHeartbeatInterval[] = "HORA_HEARTBEAT_INTERVAL_SECONDS";
constexpr const char kEnvHeartbeatTimeout[] = "HORA_HEARTBEAT_TIMEOUT_SECONDS";
constexpr const char kEnvCollectiveTimeout[] = "HORA_COLLECTIVE_TIMEOUT_SECONDS";
constexpr const char kEnvStallWarning[] = "HORA_STALL_WARNING_SECONDS";
constexpr const char kEnvStallTimeout[] = "HORA_STALL_TIMEOUT_SECONDS";
constexpr const char kEnvDiagnoseSeconds[] = "HORA_DIAGNOSE_SECONDS";
constexpr const char kEnvDiagnoseFile[] = "HORA_DIAGNOSE_FILE";
constexpr const char kEnvDiagnoseSignal[] = "HORA_DIAGNOSE_SIGNAL";
constexpr const char kEnvFlightRecorderSize[] = "HORA_FLIGHT_RECORDER_SIZE";
constexpr const char kEnvLogLevel[] = "HORA_LOG_LEVEL";
constexpr const char kEnvCpuOperations[] = "HORA_CPU_OPERATIONS";
constexpr const char kEnvSteady[] = "HORA_STEADY";
constexpr const char kEnvSteadyPatienceMs[] = "HORA_STEADY_PATIENCE_MS";
constexpr const char kEnvHostRelay[] = "HORA_HOST_RELAY";
// HORA_HOST_RELAY=auto relays from this many ranks on.
constexpr int kHostRelayAutoRanks = 64;
constexpr const char kEnvDeterministic[] = "HORA_DETERMINISTIC";
constexpr const char kEnvGpuOperations[] = "HORA_GPU_OPERATIONS";
constexpr const char kEnvHierarchicalAllreduce[] = "HORA_HIERARCHICAL_ALLREDUCE";
constexpr const char kEnvHorovodHierarchicalAllreduce[] = "HOROVOD_HIERARCHICAL_ALLREDUCE";
constexpr const char kEnvGlooIface[] = "HORA_GLOO_IFACE";
constexpr const char kEnvMaxMessageBytes[] = "HORA_MAX_MESSAGE_BYTES";
constexpr const char kEnvTlsCert[] = "HORA_TLS_CERT";
constexpr const char kEnvTlsKey[] = "HORA_TLS_KEY";
constexpr const char kEnvTlsCa[] = "HORA_TLS_CA";
constexpr const char kEnvTimeline[] = "HORA_TIMELINE";
constexpr const char kEnvHorovodTimeline[] = "HOROVOD_TIMELINE";
constexpr const char kEnvTimelineMarkCycles[] = "HORA_TIMELINE_MARK_CYCLES";
constexpr const char kEnvHorovodTimelineMarkCycles[] = "HOROVOD_TIMELINE_MARK_CYCLES";
constexpr const char kEnvAutotune[] = "HORA_AUTOTUNE";
constexpr const char kEnvHorovodAutotune[] = "HOROVOD_AUTOTUNE";
constexpr const char kEnvAutotuneLog[] = "HORA_AUTOTUNE_LOG";
constexpr const char kEnvHorovodAutotuneLog[] = "HOROVOD_AUTOTUNE_LOG";
constexpr const char kEnvAutotuneWarmupSamples[] = "HORA_AUTOTUNE_WARMUP_SAMPLES";
constexpr const char kEnvHorovodAutotuneWarmupSamples[] = "HOROVOD_AUTOTUNE_WARMUP_SAMPLES";
constexpr const char kEnvAutotuneStepsPerSample[] = "HORA_AUTOTUNE_STEPS_PER_SAMPLE";
constexpr const char kEnvHorovodAutotuneStepsPerSample[] = "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE";
constexpr const char kEnvAutotuneSamplesPerTrial[] = "HORA_AUTOTUNE_SAMPLES_PER_TRIAL";

struct Options {
  // Identity: the launcher's (runtime/launch_env.h: horarun's HORA_RANK/HORA_SIZE, Open MPI,
  // PMI, torchrun, Slurm), else rank 0 of 1. The init config's rank and size win.
  int rank = 0;
  int size = 1;
  // What the launcher said, local and cross ranks included (checked against the topology at
  // start), and its rules for the address and the token.
  LaunchEnv launch;
  // host:port of the coordinator, which the ranks connect to: the init config's, else
  // HORA_COORDINATOR_ADDR, else 127.0.0.1:0 for a single-rank job, else the launcher's rule
  // (Slurm: first host and a port from the job id; torchrun: MASTER_ADDR:MASTER_PORT+1).
  // "" when rank 0 publishes it at start through coordinator_exchange.
  std::string coordinator_address;
  // "pmix" under Open MPI without an address: rank 0 listens on coordinator_listen_port (0 =
  // a free port) and publishes host:port through PMIx; the others read it. "" = no exchange.
  std::string coordinator_exchange;
  int coordinator_listen_port = 0;
  // Rank 0 listens on every interface (0.0.0.0) at the address's port, because the address is
  // a name that may resolve to loopback on rank 0's own host (Slurm, torchrun).
  bool coordinator_listen_any = false;
  // HORA_COORDINATOR_IFACE: interface names ("eth0" or "ib0,eth0"); rank 0 listens on the
  // first one's IPv4 address (and publishes it). "" = the rules above, and for a published
  // address 127.0.0.1 when every rank is on one host, else the first non-loopback interface.
  std::string coordinator_iface;
  // HORA_JOB_TOKEN; else derived from the launcher's job id (Open MPI / PMIx namespace, Slurm
  // job and step, torchrun run id and master); else random for a single-rank job; else an error.
  std::string token;
  std::string hostname;  // HORA_HOSTNAME, else gethostname(); decides local ranks

  int64_t fusion_threshold_bytes =
      kDefaultFusionThresholdBytes;  // HORA_FUSION_THRESHOLD, bytes; 0 = no fusion
  // HORA_CYCLE_TIME_MS: longest wait to fill a bucket.
  double cycle_time_ms = kDefaultCycleTime.count() / 1000.0;
  // HORA_INLINE_THRESHOLD, bytes: allreduces up to this size are reduced by the coordinator
  // from data sent with the ready notice (one round trip, no data-plane collective). 0 = off.
  int64_t inline_threshold_bytes = kDefaultInlineThresholdBytes;
  double start_timeout_s = kDefaultStartTimeout.count() / 1000.0;  // HORA_START_TIMEOUT_SECONDS
  double heartbeat_interval_s =
      kDefaultHeartbeatInterval.count() / 1000.0;  // HORA_HEARTBEAT_INTERVAL_SECONDS
  double heartbeat_timeout_s =
      kDefaultHeartbeatTimeout.count() / 1000.0;  // HORA_HEARTBEAT_TIMEOUT_SECONDS
  double collective_timeout_s = 0;  // HORA_COLLECTIVE_TIMEOUT_SECONDS; 0 = heartbeat timeout
  double stall_warning_s = kDefaultStallWarning.count() / 1000.0;  // HORA_STALL_WARNING_SECONDS
  double stall_timeout_s =
      kDefaultStallTimeout.count() / 1000.0;  // HORA_STALL_TIMEOUT_SECONDS; 0 = off
  std::string log_level = "warning";          // HORA_LOG_LEVEL
  // The flight recorder and the diagnosis (docs/failure-model.md "Diagnosis").
  // HORA_FLIGHT_RECORDER_SIZE: operations each rank remembers; 0 = off.
  int64_t flight_recorder_size = kDefaultFlightRecorderSize;
  // HORA_DIAGNOSE_SECONDS: how long a diagnosis waits for the ranks (each waits half of it for
  // its Python stacks); 0 = no diagnosis.
  double diagnose_s = kDefaultDiagnoseDeadline.count() / 1000.0;
  // HORA_DIAGNOSE_FILE: where rank 0 appends every diagnosis; "" = /tmp/hora-diagnosis-PID.txt
  // (PID: rank 0's); "none" = the log only. horarun sets it per job.
  std::string diagnose_file;
  // HORA_DIAGNOSE_SIGNAL: the signal that makes a rank ask for a diagnosis: 10 (SIGUSR1, the
  // default), 12 (SIGUSR2) or 0 (none). Installed only where the signal's disposition is
  // the default one, so a handler of the program's own is never replaced.
  int diagnose_signal = 10;
  // HORA_STEADY: the steady path (docs/design.md "Steady state"): "auto" (on for every set
  // whose communicator offers a shared board: shm), "on" (the same, and a set without one is
  // an error), "off" (every operation asks the coordinator).
  std::string steady = "auto";
  // HORA_HOST_RELAY: the ranks of a host other than rank 0's reach the coordinator through
  // their host's lowest rank (coordinator/host_relay.h), so that rank 0 holds a connection
  // per host: "auto" (from kHostRelayAutoRanks ranks on), "on", "off".
  std::string host_relay = "auto";
  // HORA_STEADY_PATIENCE_MS: how long an operation waits on the steady path for the other
  // members before it goes the normal way.
  int64_t steady_patience_ms = 500;
  // HORA_DETERMINISTIC (or hora_init's config): CPU allreduces of floating types with Sum or
  // Average give the same bits whatever the fusion, grouping, backend and host layout: every
  // element is the left-to-right sum of the ranks' values in rank order, then the postscale
  // (collectives/deterministic.h, docs/design.md "Deterministic reductions").
  bool deterministic = false;
  // HORA_CPU_OPERATIONS: the data-plane backend for CPU tensors, "auto" or a built backend's
  // name (collectives/registry.h); a process set may name its own. HORA_GPU_OPERATIONS: the
  // same for CUDA tensors. HORA_HIERARCHICAL_ALLREDUCE (else HOROVOD_) turns an "auto" here
  // into "prefer:hierarchical" (1) or "avoid:hierarchical" (0); a named backend stays.
  std::string cpu_operations = "auto";
  std::string gpu_operations = "auto";
  std::string gloo_iface;  // HORA_GLOO_IFACE: address to bind; "" = automatic
  int64_t max_message_bytes = kDefaultMaxMessageBytes;  // HORA_MAX_MESSAGE_BYTES (control plane)
  std::string tls_cert, tls_key, tls_ca;                // HORA_TLS_CERT / _KEY / _CA (PEM files)
  // HORA_TIMELINE (else HOROVOD_TIMELINE): write the timeline from init on; each rank writes
  // its own file (runtime/timeline.h: rank 0 "t.json", rank 3 "t.rank3.json"). "" = off.
  std::string timeline;
  // HORA_TIMELINE_MARK_CYCLES (else HOROVOD_): CYCLE_START instants in the timeline.
  bool timeline_mark_cycles = false;

  // HORA_AUTOTUNE (else HOROVOD_AUTOTUNE) = 1: rank 0's coordinator tunes the fusion threshold
  // and cycle time during the first steps (coordinator/autotuner.h, docs/autotune.md). A
  // threshold or cycle time set explicitly is kept fixed and not searched.
  bool autotune = false;
  bool fusion_threshold_set = false;  // HORA_FUSION_THRESHOLD was given
  bool cycle_time_set = false;        // HORA_CYCLE_TIME_MS was given
  std::string autotune_log;           // HORA_AUTOTUNE_LOG (else HOROVOD_): CSV by rank 0; "" = none
  int autotune_warmup_samples = 3;    // HORA_AUTOTUNE_WARMUP_SAMPLES: samples thrown away first
  int autotune_steps_per_sample = 10;  // HORA_AUTOTUNE_STEPS_PER_SAMPLE: steps in one sample
  int autotune_samples_per_trial = 5;  // HORA_AUTOTUNE_SAMPLES_PER_TRIAL: median of these per trial

  // Horovod variables read as Hora's (or ignored), and HORA_* names Hora does not know
  // (runtime/env_aliases.h): logged at start, at info and warning level.
  std::vector<std::string> env_notes;
  std::vector<std::string> env_warnings;
  // The process environment as OptionsFromEnvironment read it, for the backends that need
  // their launcher's variables (BackendConfig::env); null from ParseOptions alone.
  std::shared_ptr<const std::map<std::string, std::string>> environment;

  // The options that must agree on every rank, as one string the coordinator compares.
  std::string Digest() const;
  // One line for the start-up log.
  std::string Describe() const;
};

// Overrides given through hora_init's config struct; unset fields keep the environment's.
struct OptionOverrides {
  int rank = -1;
  int size = -1;
  std::string coordinator_address;
  std::string token;
  int deterministic = -1;  // -1: HORA_DETERMINISTIC; 0 or 1 wins over it
};

// Reads and validates every option. A bad value is InvalidArgument naming the variable and
// the value ("HORA_FUSION_THRESHOLD='12x' is not a non-negative integer number of bytes").
StatusOr<Options> ParseOptions(const EnvLookup& env, const OptionOverrides& overrides);

// ParseOptions over the process environment.
StatusOr<Options> OptionsFromEnvironment(const OptionOverrides& overrides);

// The process environment, read here and nowhere else (for what is needed before hora_init,
// such as hora_nccl_version).
EnvLookup ProcessEnvironment();

}  // namespace hora

#endif  // HORA_RUNTIME_OPTIONS_H_
