// Which launcher started this process, and what it says about the job: rank, size, local and
// cross rank, where the others find rank 0's coordinator, and a token derived from its job id.
// Pure functions over an environment lookup; options.cc is their only caller (the environment
// is read in one place). docs/launching.md, "Without horarun", is the long form of each rule.
//
// Detection: the first launcher whose rank variable is set, in this order:
//   horarun   HORA_RANK            (HORA_SIZE, HORA_LOCAL_*, HORA_CROSS_*)
//   Open MPI  OMPI_COMM_WORLD_RANK (OMPI_COMM_WORLD_SIZE, _LOCAL_RANK, _LOCAL_SIZE)
//   PMI       PMI_RANK             (PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS: MPICH's Hydra)
//   torchrun  RANK                 (WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK,
//                                   GROUP_WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
//   Slurm     SLURM_PROCID         (SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, the node and
//                                   tasks-per-node lists, SLURM_JOB_ID, SLURM_STEP_ID)
// torchrun comes before Slurm because `srun torchrun ...` sets both, and RANK is the rank.
#ifndef HORA_RUNTIME_LAUNCH_ENV_H_
#define HORA_RUNTIME_LAUNCH_ENV_H_

#include <functional>
#include <initializer_list>
#include <string>

#include "common/status.h"

namespace hora {

// Returns the value of an environment variable, or nullptr when it is not set.
using EnvLookup = std::function<const char*(const char*)>;

// The value of the first of `names` that is set and not empty (its name in *which), else nullptr.
const char* FirstSet(const EnvLookup& env, std::initializer_list<const char*> names,
                     const char** which);

constexpr const char kEnvCoordinatorPort[] = "HORA_COORDINATOR_PORT";

enum class Launcher { kNone, kHorarun, kOpenMpi, kPmi, kTorchrun, kSlurm };

// "none", "horarun", "Open MPI", "PMI", "torchrun", "Slurm".
const char* LauncherName(Launcher l);

// The first Slurm port is kSlurmPortBase; the rule spans kSlurmPortSpan ports:
// port = kSlurmPortBase + (SLURM_JOB_ID % 1000) * 20 + SLURM_STEP_ID % 20, so 1000 consecutive
// jobs, each with up to 20 steps at once, get distinct ports.
constexpr int kSlurmPortBase = 20000;
constexpr int kSlurmPortSpan = 20000;
int SlurmCoordinatorPort(unsigned long long job_id, unsigned long long step_id);

struct LaunchEnv {
  Launcher launcher = Launcher::kNone;
  int rank = 0;  // 0 of 1 without a launcher
  int size = 1;
  // -1 where the launcher does not say (Open MPI has no host index; PMI none of the four).
  int local_rank = -1;
  int local_size = -1;
  int cross_rank = -1;
  int cross_size = -1;
  // host:port the other ranks connect to, by the launcher's rule (Slurm: the first host of the
  // node list; torchrun: MASTER_ADDR); "" when the launcher gives none.
  std::string coordinator_address;
  // Open MPI under PMIx: rank 0 publishes its address through PMIx at start (runtime/bootstrap).
  bool address_through_pmix = false;
  // Rank 0's port when it listens for a published address: HORA_COORDINATOR_PORT, else 0 (free).
  int listen_port = 0;
  // Slurm and torchrun: the address is a name every rank resolves; rank 0 listens on every
  // interface of its host (or HORA_COORDINATOR_IFACE's), not on what the name resolves to there.
  bool listen_any = false;
  // Derived from the launcher's job id (the same on every rank of one job); "" when none.
  std::string token;
  std::string rank_var = "";  // the variables rank and size came from, for messages
  std::string size_var = "";

  // Every rank on one host, as far as the launcher tells.
  bool SingleHost() const { return local_size == size || cross_size == 1; }
};

// Reads the launcher's variables. A bad or inconsistent value is InvalidArgument naming the
// variable and the value ("SLURM_PROCID='4' is not below SLURM_NTASKS='4'").
StatusOr<LaunchEnv> DetectLaunchEnv(const EnvLookup& env);

// "" when the launcher's local and cross values (those it gives) agree with the coordinator's
// topology, else a sentence naming both, for a warning.
std::string CompareWithTopology(const LaunchEnv& l, int local_rank, int local_size, int cross_rank,
                                int cross_size);

}  // namespace hora

#endif  // HORA_RUNTIME_LAUNCH_ENV_H_
