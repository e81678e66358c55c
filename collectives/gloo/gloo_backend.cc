// Registers the Gloo backend: CPU tensors, any set, any number of hosts. It is the default
// CPU backend ("auto") until a faster one that can serve the set is built.
#include "collectives/address.h"
#include "collectives/gloo/gloo_communicator.h"
#include "collectives/registry.h"

namespace hora {
namespace {

StatusOr<std::unique_ptr<Communicator>> CreateForSet(const BackendConfig& c) {
  GlooConfig gc;
  gc.rank = c.rank;
  gc.size = c.size();
  gc.store = c.store;
  gc.key_prefix = c.key_prefix;
  gc.timeout = c.timeout;
  StatusOr<std::string> address = BindAddress(c);
  if (!address.ok()) return address.status();
  gc.bind_address = address.value();
  return CreateGlooCommunicator(gc);
}

BackendInfo GlooInfo() {
  BackendInfo info;
  info.name = "gloo";
  info.device = Device::kCpu;
  info.auto_priority = 10;
  info.create = CreateForSet;
  info.concurrent = [](const BackendConfig&) { return true; };  // a context per communicator
  return info;
}

}  // namespace

HORA_REGISTER_BACKEND(GlooInfo());

}  // namespace hora
