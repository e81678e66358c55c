#include "runtime/launch_env.h"

#include <cerrno>
#include <cstdlib>

#include "runtime/launch_env_util.h"

namespace hora {
namespace launch_env_internal {

const char* Get(const EnvLookup& env, const char* name) {
  const char* v = env(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

Status ReadInt(const EnvLookup& env, const char* name, long long lo, long long hi, bool required,
               const char* because, long long* out) {
  const char* v = Get(env, name);
  if (v == nullptr) {
    if (!required) return Status::Ok();
    return InvalidArgument(
        std::string(name) + " is not set" +
        (*because != '\0' ? std::string(" (") + because + " is)" : std::string()));
  }
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi) {
    return InvalidArgument(std::string(name) + "='" + v + "' is not an integer in [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  *out = x;
  return Status::Ok();
}

Status CheckBelow(const char* rank_var, long long rank, const char* size_var, long long size) {
  if (rank < size) return Status::Ok();
  return InvalidArgument(std::string(rank_var) + "='" + std::to_string(rank) + "' is not below " +
                         size_var + "='" + std::to_string(size) + "'");
}

Status ReadPortOverride(const EnvLookup& env, int* port, bool* given) {
  long long p = -1;
  HORA_RETURN_IF_ERROR(ReadInt(env, kEnvCoordinatorPort, 1, 65535, false, "", &p));
  *given = p > 0;
  if (*given) *port = static_cast<int>(p);
  return Status::Ok();
}

}  // namespace launch_env_internal

namespace {

using namespace launch_env_internal;

// One launcher's four identity variables; the local and cross ones may be nullptr.
struct Names {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  const char* cross_rank;
  const char* cross_size;
};

// Reads rank/size (size required once rank is set) and whichever local/cross pairs are set,
// each rank below its size.
Status ReadIdentity(const EnvLookup& env, const Names& n, LaunchEnv* l) {
  long long rank = 0, size = 1;
  HORA_RETURN_IF_ERROR(ReadInt(env, n.rank, 0, 1 << 20, true, n.size, &rank));
  HORA_RETURN_IF_ERROR(ReadInt(env, n.size, 1, 1 << 20, true, n.rank, &size));
  HORA_RETURN_IF_ERROR(CheckBelow(n.rank, rank, n.size, size));
  l->rank = static_cast<int>(rank);
  l->size = static_cast<int>(size);
  l->rank_var = n.rank;
  l->size_var = n.size;
  const char* pairs[2][2] = {{n.local_rank, n.local_size}, {n.cross_rank, n.cross_size}};
  int* outs[2][2] = {{&l->local_rank, &l->local_size}, {&l->cross_rank, &l->cross_size}};
  for (int i = 0; i < 2; ++i) {
    if (pairs[i][0] == nullptr || Get(env, pairs[i][0]) == nullptr) continue;
    long long r = -1, s = -1;
    HORA_RETURN_IF_ERROR(ReadInt(env, pairs[i][0], 0, 1 << 20, true, "", &r));
    HORA_RETURN_IF_ERROR(ReadInt(env, pairs[i][1], 1, size, true, pairs[i][0], &s));
    HORA_RETURN_IF_ERROR(CheckBelow(pairs[i][0], r, pairs[i][1], s));
    *outs[i][0] = static_cast<int>(r);
    *outs[i][1] = static_cast<int>(s);
  }
  return Status::Ok();
}

Status ReadOpenMpi(const EnvLookup& env, LaunchEnv* l) {
  HORA_RETURN_IF_ERROR(
      ReadIdentity(env,
                   {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                    "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr, nullptr},
                   l));
  if (const char* ns = Get(env, "PMIX_NAMESPACE")) {
    l->address_through_pmix = true;
    l->token = std::string("PMIX_NAMESPACE=") + ns;
  } else if (const char* id = Get(env, "OMPI_MCA_ess_base_jobid")) {
    l->token = std::string("OMPI_MCA_ess_base_jobid=") + id;
  } else if (const char* old = Get(env, "OMPI_MCA_orte_ess_jobid")) {
    l->token = std::string("OMPI_MCA_orte_ess_jobid=") + old;
  }
  bool given = false;
  return ReadPortOverride(env, &l->listen_port, &given);
}

// torchrun's agent listens on MASTER_PORT itself (its TCPStore), so the coordinator takes the
// next port: MASTER_PORT + 1, or HORA_COORDINATOR_PORT.
Status ReadTorchrun(const EnvLookup& env, LaunchEnv* l) {
  HORA_RETURN_IF_ERROR(ReadIdentity(
      env,
      {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE"},
      l));
  const char* master = Get(env, "MASTER_ADDR");
  if (master == nullptr)
    return Status::Ok();  // the address must then come from HORA_COORDINATOR_ADDR
  int port = 0;
  bool given = false;
  HORA_RETURN_IF_ERROR(ReadPortOverride(env, &port, &given));
  long long master_port = -1;
  HORA_RETURN_IF_ERROR(
      ReadInt(env, "MASTER_PORT", 1, given ? 65535 : 65534, !given, "MASTER_ADDR", &master_port));
  if (!given) port = static_cast<int>(master_port + 1);
  l->coordinator_address = std::string(master) + ":" + std::to_string(port);
  l->listen_any = true;
  // torchrun's agent restarts every worker with the same run id and a new restart count: each
  // attempt is a job of its own, so a rank left over from the last one is refused.
  const char* run_id = Get(env, "TORCHELASTIC_RUN_ID");
  const char* restart = Get(env, "TORCHELASTIC_RESTART_COUNT");
  l->token = std::string("torchrun:") + (run_id != nullptr ? run_id : "") +
             (restart != nullptr && std::string(restart) != "0" ? std::string("#") + restart : "") +
             "@" + master + ":" +
             (master_port > 0 ? std::to_string(master_port) : std::to_string(port));
  return Status::Ok();
}

}  // namespace

const char* FirstSet(const EnvLookup& env, std::initializer_list<const char*> names,
                     const char** which) {
  for (const char* n : names) {
    if (const char* v = Get(env, n)) {
      *which = n;
      return v;
    }
  }
  return nullptr;
}

const char* LauncherName(Launcher l) {
  switch (l) {
    case Launcher::kNone:
      return "none";
    case Launcher::kHorarun:
      return "horarun";
    case Launcher::kOpenMpi:
      return "Open MPI";
    case Launcher::kPmi:
      return "PMI";
    case Launcher::kTorchrun:
      return "torchrun";
    case Launcher::kSlurm:
      return "Slurm";
  }
  return "?";
}

int SlurmCoordinatorPort(unsigned long long job_id, unsigned long long step_id) {
  return kSlurmPortBase + static_cast<int>(job_id % 1000) * 20 + static_cast<int>(step_id % 20);
}

StatusOr<LaunchEnv> DetectLaunchEnv(const EnvLookup& env) {
  LaunchEnv l;
  if (Get(env, "HORA_RANK") != nullptr || Get(env, "HORA_SIZE") != nullptr) {
    l.launcher = Launcher::kHorarun;
    HORA_RETURN_IF_ERROR(ReadIdentity(env,
                                      {"HORA_RANK", "HORA_SIZE", "HORA_LOCAL_RANK",
                                       "HORA_LOCAL_SIZE", "HORA_CROSS_RANK", "HORA_CROSS_SIZE"},
                                      &l));
  } else if (Get(env, "OMPI_COMM_WORLD_RANK") != nullptr) {
    l.launcher = Launcher::kOpenMpi;
    HORA_RETURN_IF_ERROR(ReadOpenMpi(env, &l));
  } else if (Get(env, "PMI_RANK") != nullptr) {
    l.launcher = Launcher::kPmi;
    HORA_RETURN_IF_ERROR(ReadIdentity(
        env, {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", nullptr, nullptr}, &l));
  } else if (Get(env, "RANK") != nullptr) {
    l.launcher = Launcher::kTorchrun;
    HORA_RETURN_IF_ERROR(ReadTorchrun(env, &l));
  } else if (Get(env, "SLURM_PROCID") != nullptr) {
    l.launcher = Launcher::kSlurm;
    HORA_RETURN_IF_ERROR(ReadSlurm(env, &l));
  }
  return l;
}

std::string CompareWithTopology(const LaunchEnv& l, int local_rank, int local_size, int cross_rank,
                                int cross_size) {
  std::string diff;
  auto check = [&diff](const char* what, int launcher, int topology) {
    if (launcher < 0 || launcher == topology) return;
    diff += std::string(diff.empty() ? "" : ", ") + what + " " + std::to_string(launcher) +
            " (hostnames give " + std::to_string(topology) + ")";
  };
  check("local rank", l.local_rank, local_rank);
  check("local size", l.local_size, local_size);
  check("cross rank", l.cross_rank, cross_rank);
  check("cross size", l.cross_size, cross_size);
  if (diff.empty()) return diff;
  return std::string(LauncherName(l.launcher)) + " says " + diff +
         "; Hora uses the hostnames (set HORA_HOSTNAME per host to change them)";
}

}  // namespace hora
