// Registers the tcp backend: CPU tensors of sets that span several hosts. auto_priority 12:
// above gloo (10), so "auto" (and the hierarchical backend's cross-host group, which asks
// for "avoid:hierarchical") takes it across hosts; below mpi (15) under an MPI launcher, and
// never on one host, where shm (20) serves. Gloo stays the fallback, by name:
// HORA_CPU_OPERATIONS=gloo (flat; the hierarchical backend's cross-host group takes "auto",
// so no selection makes it use gloo while tcp is built).
#include "collectives/address.h"
#include "collectives/registry.h"
#include "collectives/tcp/tcp_communicator.h"

namespace hora {
namespace {

StatusOr<std::unique_ptr<Communicator>> CreateForSet(const BackendConfig& c) {
  StatusOr<TcpOptions> options = TcpOptionsFromEnv(c.env);
  if (!options.ok()) return options.status();
  return CreateTcpCommunicator(c, options.value());
}

BackendInfo TcpInfo() {
  BackendInfo info;
  info.name = kTcpBackend;
  info.device = Device::kCpu;
  info.auto_priority = 12;
  info.can_serve = [](const BackendConfig& c) -> Status {
    if (c.SingleHost() && !c.hostnames.empty()) {
      return Unavailable(
          "tcp is chosen automatically only for sets on several hosts (name it "
          "to use it on one)");
    }
    return Status::Ok();
  };
  info.create = CreateForSet;
  info.concurrent = [](const BackendConfig&) { return true; };  // connections per communicator
  return info;
}

}  // namespace

HORA_REGISTER_BACKEND(TcpInfo());

}  // namespace hora
