#include "collectives/registry.h"

#include <algorithm>
#include <mutex>
#include <utility>

#include "collectives/deterministic.h"
#include "common/logging.h"

namespace hora {
namespace {

const char* DeviceName(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

// Function-local so that registration from other translation units' static initializers
// never sees an unconstructed vector.
std::vector<BackendInfo>& Backends() {
  static std::vector<BackendInfo> backends;
  return backends;
}

std::vector<StagingInfo>& Stagings() {
  static std::vector<StagingInfo> stagings;
  return stagings;
}

const StagingInfo* StagingFor(Device device) {
  for (const StagingInfo& s : Stagings()) {
    if (s.device == device) return &s;
  }
  return nullptr;
}

// Whether backend b serves config.device's tensors through a staging (a CPU backend named for
// a device's tensors).
bool Staged(const BackendInfo& b, const BackendConfig& config) {
  return b.device != config.device && b.device == Device::kCpu && StagingFor(config.device);
}

BackendConfig HostConfig(const BackendConfig& config) {
  BackendConfig host = config;
  host.device = Device::kCpu;
  host.device_index = 0;
  return host;
}

// b.can_serve for the set, through the staging when b is a staged CPU backend.
Status CanServe(const BackendInfo& b, const BackendConfig& config) {
  if (!Staged(b, config)) return b.can_serve ? b.can_serve(config) : Status::Ok();
  HORA_RETURN_IF_ERROR(StagingFor(config.device)->can_serve(config));
  return b.can_serve ? b.can_serve(HostConfig(config)) : Status::Ok();
}

const BackendInfo* Find(const std::string& name) {
  for (const BackendInfo& b : Backends()) {
    if (b.name == name) return &b;
  }
  return nullptr;
}

std::string Members(const BackendConfig& c) {
  std::string s;
  for (size_t i = 0; i < c.global_ranks.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(c.global_ranks[i]);
  }
  return "process set " + std::to_string(c.process_set) + " (ranks " + s + ")";
}

struct Selection {
  enum Mode { kAuto, kNamed, kPrefer, kAvoid } mode = kAuto;
  std::string name;  // the backend named (kNamed, kPrefer, kAvoid)
};

Selection ParseSelection(const std::string& s) {
  Selection sel;
  if (s == "auto") return sel;
  for (auto [prefix, mode] :
       {std::pair<const char*, Selection::Mode>{"prefer:", Selection::kPrefer},
        {"avoid:", Selection::kAvoid}}) {
    const std::string p = prefix;
    if (s.compare(0, p.size(), p) == 0) {
      sel.mode = mode;
      sel.name = s.substr(p.size());
      return sel;
    }
  }
  sel.mode = Selection::kNamed;
  sel.name = s;
  return sel;
}

// The "auto" choice for the set, never `avoid`; nullptr when none can serve it (each
// refusal is appended to *refusals as "; name: why").
const BackendInfo* AutoChoice(const BackendConfig& config, const std::string& avoid,
                              std::string* refusals) {
  const BackendInfo* chosen = nullptr;
  for (const BackendInfo& b : Backends()) {
    if (b.device != config.device || b.auto_priority <= 0 || b.name == avoid) continue;
    Status s = b.can_serve ? b.can_serve(config) : Status::Ok();
    if (!s.ok()) {
      *refusals += "; " + b.name + ": " + s.message();
      continue;
    }
    if (chosen == nullptr || b.auto_priority > chosen->auto_priority) chosen = &b;
  }
  return chosen;
}

}  // namespace

bool BackendConfig::SingleHost() const {
  for (const std::string& h : hostnames) {
    if (h != hostnames.front()) return false;
  }
  return true;
}

bool RegisterBackend(BackendInfo info) {
  HORA_CHECK(Find(info.name) == nullptr && "a backend registered twice");
  Backends().push_back(std::move(info));
  return true;
}

bool RegisterStaging(StagingInfo info) {
  HORA_CHECK(StagingFor(info.device) == nullptr && "a staging registered twice");
  Stagings().push_back(std::move(info));
  return true;
}

std::vector<std::string> BuiltBackends() {
  std::vector<std::string> names;
  for (const BackendInfo& b : Backends()) names.push_back(b.name);
  std::sort(names.begin(), names.end());
  return names;
}

bool IsBackendBuilt(const std::string& name) { return Find(name) != nullptr; }

bool BackendOffersSharedBoard(const std::string& name) {
  const BackendInfo* b = Find(name);
  return b != nullptr && b->shared_board;
}

bool BackendRunsConcurrently(const std::string& name, const BackendConfig& config) {
  const BackendInfo* b = Find(name);
  return b != nullptr && b->concurrent && b->concurrent(config);
}

int BackendLibraryVersion(const std::string& name,
                          const std::function<const char*(const char*)>& env, std::string* detail) {
  const BackendInfo* b = Find(name);
  if (b == nullptr || !b->library) {
    *detail = b == nullptr ? "backend '" + name + "' is not built into this libhora"
                           : "backend '" + name + "' loads no library";
    return -1;
  }
  return b->library(env, detail);
}

std::string BuiltBackendsString() {
  std::string s;
  for (const std::string& n : BuiltBackends()) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

Status CheckSelection(const std::string& selection, Device device, const std::string& option) {
  const Selection sel = ParseSelection(selection);
  if (sel.mode == Selection::kAuto) return Status::Ok();
  if (sel.name.empty()) {
    return InvalidArgument(option + "=" + selection +
                           ": 'prefer:' and 'avoid:' must be followed by a backend name");
  }
  const BackendInfo* b = Find(sel.name);
  if (b == nullptr) {
    return InvalidArgument(option + "=" + selection + ": no backend '" + sel.name +
                           "' is built into this libhora (built: " + BuiltBackendsString() + ")");
  }
  const bool staged = b->device == Device::kCpu && StagingFor(device) != nullptr;
  if (b->device != device && !staged) {
    return InvalidArgument(option + "=" + selection + ": backend '" + sel.name + "' serves " +
                           DeviceName(b->device) + " tensors, not " + DeviceName(device));
  }
  return Status::Ok();
}

namespace {

// The backend `selection` picks for the set, or why none can serve it.
StatusOr<const BackendInfo*> Choose(const std::string& selection, const std::string& option,
                                    const BackendConfig& config) {
  HORA_RETURN_IF_ERROR(CheckSelection(selection, config.device, option));
  if (config.rank < 0 || config.rank >= config.size() ||
      config.hostnames.size() != config.global_ranks.size()) {
    return InvalidArgument("backend config for " + Members(config) + ": rank " +
                           std::to_string(config.rank) + " or hostnames do not fit the members");
  }
  const Selection sel = ParseSelection(selection);
  const BackendInfo* chosen = nullptr;
  std::string refusals;
  if (sel.mode == Selection::kPrefer) {
    const BackendInfo* b = Find(sel.name);
    Status s = CanServe(*b, config);
    if (s.ok()) {
      chosen = b;
    } else {
      refusals += "; " + b->name + ": " + s.message();
    }
  }
  if (chosen == nullptr && sel.mode != Selection::kNamed) {
    const std::string avoid = sel.mode == Selection::kAvoid ? sel.name : "";
    chosen = AutoChoice(config, avoid, &refusals);
    if (chosen == nullptr) {
      return Unavailable(option + "=" + selection + ": no built backend can serve " +
                         DeviceName(config.device) + " tensors of " + Members(config) +
                         " (built: " + BuiltBackendsString() + refusals + ")");
    }
  } else if (chosen == nullptr) {
    chosen = Find(sel.name);
    Status s = CanServe(*chosen, config);
    if (!s.ok()) {
      return Status(s.code(), option + "=" + selection + ": backend '" + selection +
                                  "' cannot serve " + Members(config) + ": " + s.message());
    }
  }
  return chosen;
}

}  // namespace

Status CheckCanServe(const std::string& selection, const std::string& option,
                     const BackendConfig& config) {
  return Choose(selection, option, config).status();
}

Status CheckCanReduce(const std::string& selection, const std::string& option,
                      const BackendConfig& config, DataType dtype) {
  auto choice = Choose(selection, option, config);
  if (!choice.ok()) return choice.status();
  const BackendInfo* chosen = choice.value();
  if (!chosen->can_reduce) return Status::Ok();
  Status s = chosen->can_reduce(dtype);
  if (s.ok()) return s;
  return Status(s.code(),
                option + "=" + selection + ": backend '" + chosen->name + "': " + s.message());
}

StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(const std::string& selection,
                                                           const std::string& option,
                                                           const BackendConfig& config) {
  auto choice = Choose(selection, option, config);
  if (!choice.ok()) return choice.status();
  const BackendInfo* chosen = choice.value();
  const bool staged = Staged(*chosen, config);
  if (config.rank == 0) {
    HORA_LOG_INFO("{}: {} operations by {}{} ({}={})", Members(config), DeviceName(config.device),
                  chosen->name, staged ? " through host memory" : "", option, selection);
  }
  // The wrapper goes around the outermost communicator only: the backend (and a hierarchical
  // backend's parts, which it creates here too) gets a config without the flag.
  BackendConfig backend_config = staged ? HostConfig(config) : config;
  backend_config.deterministic = false;
  auto comm = chosen->create(backend_config);
  if (comm.ok() && staged) comm = StagingFor(config.device)->wrap(std::move(comm).value(), config);
  if (comm.ok() && config.deterministic && config.device == Device::kCpu) {
    comm = std::unique_ptr<Communicator>(
        std::make_unique<DeterministicCommunicator>(std::move(comm).value()));
  }
  if (!comm.ok()) {
    const Status& s = comm.status();
    return Status(s.code(), Members(config) + ", backend " + chosen->name + ": " + s.message());
  }
  return comm;
}

}  // namespace hora
