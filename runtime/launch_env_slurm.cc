// Slurm's srun: one task per rank. Rank SLURM_PROCID of SLURM_NTASKS; local rank
// SLURM_LOCALID; cross rank SLURM_NODEID; tasks per node from SLURM_STEP_TASKS_PER_NODE (else
// SLURM_TASKS_PER_NODE, else SLURM_NTASKS_PER_NODE), which also gives the local size and the
// number of nodes. Task 0 runs on the first node of the step, so the coordinator is the first
// host of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST, else SLURM_NODELIST), at
// HORA_COORDINATOR_PORT or SlurmCoordinatorPort(SLURM_JOB_ID, SLURM_STEP_ID).
#include <numeric>

#include "runtime/launch_env_util.h"
#include "runtime/slurm_lists.h"

namespace hora {
namespace launch_env_internal {
namespace {

// Local size and node count from the tasks-per-node list, checked against the rest.
Status ReadTasksPerNode(const EnvLookup& env, LaunchEnv* l) {
  const char* var = nullptr;
  const char* v = FirstSet(env, {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}, &var);
  if (v == nullptr) {
    long long per_node = -1;
    HORA_RETURN_IF_ERROR(ReadInt(env, "SLURM_NTASKS_PER_NODE", 1, l->size, false, "", &per_node));
    if (per_node > 0) l->local_size = static_cast<int>(per_node);
    return Status::Ok();
  }
  auto tasks = ExpandSlurmTasksPerNode(var, v);
  if (!tasks.ok()) return tasks.status();
  const std::vector<int>& t = tasks.value();
  // The step's list describes exactly this step's tasks; the job's may describe more.
  const long long total = std::accumulate(t.begin(), t.end(), 0ll);
  if (std::string(var) == "SLURM_STEP_TASKS_PER_NODE" && total != l->size) {
    return InvalidArgument(std::string(var) + "='" + v + "' adds up to " + std::to_string(total) +
                           " tasks but " + l->size_var + "='" + std::to_string(l->size) + "'");
  }
  l->cross_size = static_cast<int>(t.size());
  if (l->cross_rank >= 0) {
    HORA_RETURN_IF_ERROR(CheckBelow("SLURM_NODEID", l->cross_rank, var, l->cross_size));
    l->local_size = t[l->cross_rank];
  }
  return Status::Ok();
}

Status ReadAddress(const EnvLookup& env, LaunchEnv* l) {
  const char* var = nullptr;
  const char* list =
      FirstSet(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &var);
  if (list == nullptr) return Status::Ok();  // the address must come from HORA_COORDINATOR_ADDR
  auto hosts = ExpandSlurmNodelist(var, list);
  if (!hosts.ok()) return hosts.status();
  if (std::string(var) == "SLURM_STEP_NODELIST" && l->cross_size > 0 &&
      hosts.value().size() != static_cast<size_t>(l->cross_size)) {
    return InvalidArgument(
        std::string(var) + "='" + list + "' has " + std::to_string(hosts.value().size()) +
        " hosts but the tasks-per-node list " + std::to_string(l->cross_size) + " nodes");
  }
  int port = 0;
  bool given = false;
  HORA_RETURN_IF_ERROR(ReadPortOverride(env, &port, &given));
  long long job = 0, step = 0;
  HORA_RETURN_IF_ERROR(ReadInt(env, "SLURM_JOB_ID", 0, 1ll << 62, !given, var, &job));
  HORA_RETURN_IF_ERROR(ReadInt(env, "SLURM_STEP_ID", 0, 1ll << 62, false, "", &step));
  if (!given) port = SlurmCoordinatorPort(job, step);
  l->coordinator_address = hosts.value().front() + ":" + std::to_string(port);
  l->listen_any = true;
  return Status::Ok();
}

}  // namespace

Status ReadSlurm(const EnvLookup& env, LaunchEnv* l) {
  long long rank = 0, size = 1, local = -1, node = -1, nodes = -1;
  const char* size_var = Get(env, "SLURM_NTASKS") != nullptr ? "SLURM_NTASKS" : "SLURM_NPROCS";
  HORA_RETURN_IF_ERROR(ReadInt(env, "SLURM_PROCID", 0, 1 << 20, true, "", &rank));
  HORA_RETURN_IF_ERROR(ReadInt(env, size_var, 1, 1 << 20, true, "SLURM_PROCID", &size));
  HORA_RETURN_IF_ERROR(CheckBelow("SLURM_PROCID", rank, size_var, size));
  l->rank = static_cast<int>(rank);
  l->size = static_cast<int>(size);
  l->rank_var = "SLURM_PROCID";
  l->size_var = size_var;
  HORA_RETURN_IF_ERROR(ReadInt(env, "SLURM_NODEID", 0, 1 << 20, false, "", &node));
  l->cross_rank = static_cast<int>(node);
  HORA_RETURN_IF_ERROR(ReadTasksPerNode(env, l));
  if (l->cross_size < 0) {
    HORA_RETURN_IF_ERROR(ReadInt(env, "SLURM_STEP_NUM_NODES", 1, 1 << 20, false, "", &nodes));
    l->cross_size = static_cast<int>(nodes);
    if (l->cross_rank >= 0 && l->cross_size > 0) {
      HORA_RETURN_IF_ERROR(
          CheckBelow("SLURM_NODEID", l->cross_rank, "SLURM_STEP_NUM_NODES", l->cross_size));
    }
  }
  if (l->cross_rank < 0 || l->cross_size < 0) l->cross_rank = l->cross_size = -1;
  HORA_RETURN_IF_ERROR(ReadInt(env, "SLURM_LOCALID", 0, 1 << 20, false, "", &local));
  l->local_rank = static_cast<int>(local);
  if (l->local_rank >= 0 && l->local_size > 0 && l->local_rank >= l->local_size) {
    return InvalidArgument("SLURM_LOCALID='" + std::to_string(l->local_rank) +
                           "' is not below this node's task count " +
                           std::to_string(l->local_size) + " (from the tasks-per-node list)");
  }
  if (l->local_rank < 0 || l->local_size < 0) l->local_rank = l->local_size = -1;
  HORA_RETURN_IF_ERROR(ReadAddress(env, l));
  if (const char* job = Get(env, "SLURM_JOB_ID")) {
    const char* step = Get(env, "SLURM_STEP_ID");
    l->token =
        std::string("SLURM_JOB_ID=") + job + (step != nullptr ? std::string(".") + step : "");
  }
  return Status::Ok();
}

}  // namespace launch_env_internal
}  // namespace hora
