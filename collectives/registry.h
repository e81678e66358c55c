// The backend registry: which data-plane backends this build has, and the factory that builds
// a process set's communicator for a device kind.
//
// A backend is a folder under collectives/ with one registration (HORA_REGISTER_BACKEND in a
// .cc of its cc_library, which is alwayslink) and one line in collectives/BUILD.bazel's
// `backends` target. Nothing above collectives/ names a backend: the runtime asks
// CreateCommunicator for "the communicator that HORA_CPU_OPERATIONS selects for this set".
//
// Staging. A device kind may register a staging (RegisterStaging): its tensors can then also
// run on a CPU backend, named for that device (HORA_GPU_OPERATIONS=gloo|shm|mpi|hierarchical),
// through host memory: CreateCommunicator builds the CPU backend's communicator and the
// staging wraps it into one for the device. "auto" never picks a staged CPU backend.
//
// Selection. `selection` is one of
//   "auto"         among the backends for the device that can serve the set, the one with
//                  the highest auto_priority (> 0); a backend with auto_priority 0 (test
//                  backends) is only used when named;
//   NAME           that backend; an error when it cannot serve the set (CanServe says why);
//   "prefer:NAME"  NAME where it can serve the set, else "auto";
//   "avoid:NAME"   "auto" without ever taking NAME (an error when nothing else can serve).
// A name that is not built or serves another device is an error naming the option and its
// value. The choice is logged once per set and device.
//
// Thread safety: registration happens during static initialization; everything else is
// read-only afterwards and thread-safe.
#ifndef HORA_COLLECTIVES_REGISTRY_H_
#define HORA_COLLECTIVES_REGISTRY_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "common/kv_store.h"
#include "common/limits.h"
#include "common/status.h"
#include "common/types.h"

namespace hora {

// Everything a backend may use to build one process set's communicator.
struct BackendConfig {
  int process_set = 0;                 // the set's id (0 = every rank)
  int rank = 0;                        // this process's rank within the set
  std::vector<int> global_ranks;       // the members' ranks in the job, sorted
  std::vector<std::string> hostnames;  // per member: decides intra- and inter-host
  Device device = Device::kCpu;
  int device_index = 0;
  KvStore* store = nullptr;  // bootstrap; not owned, used only during creation
  std::string key_prefix;    // unique per set and device; same on every member
  // Network: the address to bind (empty = automatic: loopback when every member is on
  // this host, else the local address toward coordinator_host).
  std::string bind_address;
  std::string coordinator_host;
  std::chrono::milliseconds timeout{30000};  // bounds every wait; > 0
  // How long a wait may spin, then yield its core, before it sleeps, for backends that spin
  // (shm); < 0: the backend's automatic choice.
  int spin_us = -1;
  int yield_us = -1;
  int64_t max_message_bytes = kDefaultMaxMessageBytes;  // the control plane's limit (store values)
  // > 0: the communicator also offers a zeroed board of this many bytes that every member
  // maps (Communicator::SharedBoard), where the backend can (BackendInfo::shared_board).
  size_t shared_board_bytes = 0;
  // The job's environment as runtime/options.cc read it (the one place that reads the process
  // environment): a backend that needs its launcher's variables (mpi: OMPI_COMM_WORLD_*)
  // looks them up here. Empty: no variables at all.
  std::function<const char*(const char*)> env;
  // HORA_DETERMINISTIC: CreateCommunicator wraps a CPU communicator in a
  // DeterministicCommunicator (collectives/deterministic.h); the backend itself never sees it.
  bool deterministic = false;

  int size() const { return static_cast<int>(global_ranks.size()); }
  bool SingleHost() const;
};

using BackendFactory =
    std::function<StatusOr<std::unique_ptr<Communicator>>(const BackendConfig& config)>;

struct BackendInfo {
  std::string name;
  Device device = Device::kCpu;
  int auto_priority = 0;      // higher wins for "auto"; 0 = only when named
  bool shared_board = false;  // honours BackendConfig::shared_board_bytes
  // Whether a second communicator of the same set (its own key prefix) may run collectives
  // on another thread while the first runs its own (the steady path drives one:
  // runtime/steady_path.h). Null: no.
  std::function<bool(const BackendConfig&)> concurrent;
  // OK when the backend can serve this set (e.g. every member on one host); else why not.
  std::function<Status(const BackendConfig&)> can_serve;
  // OK when the backend reduces `dtype` (allreduce, reducescatter); else why not, naming the
  // dtype. Null: every dtype. Asked at enqueue (CheckCanReduce), so that a tensor the backend
  // cannot reduce is refused on every rank instead of failing its bucket and the job.
  std::function<Status(DataType dtype)> can_reduce;
  BackendFactory create;
  // Backends over a library loaded at run time (nccl): its version code, 0 when it cannot be
  // loaded here; *detail receives the file it was loaded from, or why it could not be. env:
  // the environment as runtime/options.cc reads it (as BackendConfig::env).
  std::function<int(const std::function<const char*(const char*)>& env, std::string* detail)>
      library;
};

// Called by HORA_REGISTER_BACKEND. Returns true (for a static initializer).
bool RegisterBackend(BackendInfo info);

// How a device kind's tensors run on a CPU backend (see "Staging" above).
struct StagingInfo {
  Device device = Device::kCuda;
  // OK when this process can stage the set's tensors (a usable device); else why not.
  std::function<Status(const BackendConfig&)> can_serve;
  // Wraps the CPU backend's communicator, built for the same members, into the device's.
  std::function<StatusOr<std::unique_ptr<Communicator>>(std::unique_ptr<Communicator> host,
                                                        const BackendConfig& config)>
      wrap;
};
// Called once per device kind during static initialization. Returns true.
bool RegisterStaging(StagingInfo info);

// The names of every built backend, sorted. The one list that hora_built(),
// hvd.*_built() and horarun --check-build read.
std::vector<std::string> BuiltBackends();
bool IsBackendBuilt(const std::string& name);
// Whether the built backend `name` offers a shared board (BackendInfo::shared_board).
bool BackendOffersSharedBoard(const std::string& name);
// Whether the built backend `name` runs a second communicator of the set concurrently
// (BackendInfo::concurrent).
bool BackendRunsConcurrently(const std::string& name, const BackendConfig& config);
// "gloo, loopback".
std::string BuiltBackendsString();

// The library of a built backend (BackendInfo::library): its version code, 0 when it cannot
// be loaded (*detail says why), -1 when `name` is not built or loads no library.
int BackendLibraryVersion(const std::string& name,
                          const std::function<const char*(const char*)>& env, std::string* detail);

// Validates a selection without building anything: "auto" or a built backend of `device`.
// `option` names the knob in the message ("HORA_CPU_OPERATIONS").
Status CheckSelection(const std::string& selection, Device device, const std::string& option);

// Whether `selection` can serve the set (the choice CreateCommunicator would make, without
// building anything): OK, or the error CreateCommunicator would return. Not collective.
Status CheckCanServe(const std::string& selection, const std::string& option,
                     const BackendConfig& config);

// Whether the backend `selection` picks for the set reduces `dtype`: OK, or the refusal
// (CheckCanServe's when no backend serves the set). Not collective.
Status CheckCanReduce(const std::string& selection, const std::string& option,
                      const BackendConfig& config, DataType dtype);

// Collective over the set's members (every member calls it with the same selection and
// config apart from `rank`): builds the communicator, bounded by config.timeout.
StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const std::string& selection,
                                                           const std::string& option,
                                                           const BackendConfig& config);

}  // namespace hora

#define HORA_BACKEND_CONCAT_(a, b) a##b
#define HORA_BACKEND_CONCAT(a, b) HORA_BACKEND_CONCAT_(a, b)
// At namespace scope in one .cc of the backend: HORA_REGISTER_BACKEND(MakeGlooInfo());
#define HORA_REGISTER_BACKEND(info_expr)                                                       \
  static const bool HORA_BACKEND_CONCAT(hora_backend_registered_, __LINE__) [[maybe_unused]] = \
      ::hora::RegisterBackend(info_expr)

#endif  // HORA_COLLECTIVES_REGISTRY_H_
