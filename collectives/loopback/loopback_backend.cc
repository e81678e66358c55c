// Registers the loopback test backend. auto_priority 0: "auto" never picks it; a job or a
// process set uses it only when it is named (HORA_CPU_OPERATIONS=loopback, or per set).
#include "collectives/loopback/loopback_communicator.h"
#include "collectives/registry.h"

namespace hora {
namespace {

BackendInfo LoopbackInfo() {
  BackendInfo info;
  info.name = "loopback";
  info.device = Device::kCpu;
  info.auto_priority = 0;
  info.create = [](const BackendConfig& c) {
    LoopbackConfig lc;
    lc.rank = c.rank;
    lc.size = c.size();
    lc.store = c.store;
    lc.key_prefix = c.key_prefix;
    lc.timeout = c.timeout;
    lc.max_message_bytes = c.max_message_bytes;
    return CreateLoopbackCommunicator(lc);
  };
  return info;
}

}  // namespace

HORA_REGISTER_BACKEND(LoopbackInfo());

}  // namespace hora
