// Registers the hierarchical backend: CPU tensors, sets that span >= 2 hosts with the same
// number of members on each (>= 2). auto_priority 18: above mpi (15) and gloo (10), so
// "auto" takes it for such sets; below shm (20), which it never competes with (shm serves
// only one host, this backend only several). HOROVOD_HIERARCHICAL_ALLREDUCE=1 / 0 reach the
// registry as the selections "prefer:hierarchical" / "avoid:hierarchical" (runtime/options.cc).
#include "collectives/hierarchical/hierarchical_communicator.h"
#include "collectives/hierarchical/host_layout.h"
#include "collectives/registry.h"

namespace hora {

Status CanServeHierarchical(const BackendConfig& c) {
  const HostLayout l = LayoutOf(c.hostnames, c.rank);
  if (l.num_hosts() < 2) {
    return Unavailable("hierarchical serves sets that span several hosts, and this one is on " +
                       l.Describe());
  }
  if (l.max_local_size() < 2) {
    return Unavailable(
        "hierarchical needs several members on a host, and this set has one "
        "per host: " +
        l.Describe());
  }
  if (!l.uniform()) {
    return Unavailable("hierarchical needs the same number of members on every host: " +
                       l.Describe());
  }
  return Status::Ok();
}

namespace {

BackendInfo HierarchicalInfo() {
  BackendInfo info;
  info.name = kHierarchicalBackend;
  info.device = Device::kCpu;
  info.auto_priority = 18;
  info.can_serve = CanServeHierarchical;
  info.create = CreateHierarchicalCommunicator;
  // Its parts are shm and, across hosts, gloo or mpi; two MPI communicators driven from two
  // threads need MPI_THREAD_MULTIPLE, which the mpi backend does not ask for.
  info.concurrent = [](const BackendConfig& c) { return !CheckCanServe("mpi", "", c).ok(); };
  return info;
}

}  // namespace

HORA_REGISTER_BACKEND(HierarchicalInfo());

}  // namespace hora
