// Registers the MPI backend: CPU tensors, any set, any number of hosts, in a job started by
// an MPI launcher (mpirun, horarun --mpi). auto_priority 15: above Gloo (10), so "auto" takes
// MPI for a set that spans hosts when the job runs under mpirun; below shm (20), which still
// serves every set on one host. Outside an MPI launcher CanServe refuses, so "auto" falls
// back to Gloo and HORA_CPU_OPERATIONS=mpi fails naming the option and the reason.
#include "collectives/mpi/mpi_communicator.h"
#include "collectives/mpi/mpi_environment.h"
#include "collectives/registry.h"

namespace hora {
namespace {

Status CanServe(const BackendConfig& c) {
  // Only set 0 tells the job's size (every rank); any set tells this process's rank.
  const int job_size = c.process_set == kGlobalProcessSet ? c.size() : 0;
  return CheckMpiLauncher(c.env, c.global_ranks[c.rank], c.global_ranks, job_size);
}

BackendInfo MpiInfo() {
  BackendInfo info;
  info.name = "mpi";
  info.device = Device::kCpu;
  info.auto_priority = 15;
  info.can_serve = CanServe;
  info.create = [](const BackendConfig& c) {
    MpiConfig mc;
    mc.rank = c.rank;
    mc.world_ranks = c.global_ranks;  // CanServe checked they are MPI_COMM_WORLD's ranks
    mc.process_set = c.process_set;
    mc.store = c.store;
    mc.key_prefix = c.key_prefix;
    mc.timeout = c.timeout;
    mc.env = c.env;
    return CreateMpiCommunicator(mc);
  };
  return info;
}

}  // namespace

HORA_REGISTER_BACKEND(MpiInfo());

}  // namespace hora
