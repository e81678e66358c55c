// Registers the shm backend: CPU tensors, the members of one process set on one host.
// auto_priority 20, above Gloo's 10: "auto" takes it for every set on one host; sets that span
// hosts are refused by CanServe and get MPI under an MPI launcher (mpi_backend.cc), else Gloo.
#include <set>

#include "collectives/registry.h"
#include "collectives/shm/shm_communicator.h"

namespace hora {
namespace {

Status CanServe(const BackendConfig& c) {
  if (c.SingleHost()) return Status::Ok();
  std::set<std::string> hosts(c.hostnames.begin(), c.hostnames.end());
  std::string list;
  for (const std::string& h : hosts) list += (list.empty() ? "" : ", ") + h;
  return Unavailable("shared memory serves the members of one host, and this set spans " +
                     std::to_string(hosts.size()) + " hosts (" + list + ")");
}

BackendInfo ShmInfo() {
  BackendInfo info;
  info.name = "shm";
  info.device = Device::kCpu;
  info.auto_priority = 20;
  info.shared_board = true;
  info.concurrent = [](const BackendConfig&) { return true; };  // a segment per communicator
  info.can_serve = CanServe;
  info.create = [](const BackendConfig& c) {
    ShmConfig sc;
    sc.rank = c.rank;
    sc.size = c.size();
    sc.store = c.store;
    sc.key_prefix = c.key_prefix;
    sc.timeout = c.timeout;
    sc.spin_us = c.spin_us;
    sc.yield_us = c.yield_us;
    sc.board_bytes = c.shared_board_bytes;
    return CreateShmCommunicator(sc);
  };
  return info;
}

}  // namespace

HORA_REGISTER_BACKEND(ShmInfo());

}  // namespace hora
