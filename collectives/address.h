// Which local address a network transport of the data plane binds for a process set.
#ifndef HORA_COLLECTIVES_ADDRESS_H_
#define HORA_COLLECTIVES_ADDRESS_H_

#include <string>

#include "collectives/registry.h"
#include "common/status.h"

namespace hora {

// config.bind_address when set; else loopback when every member is on this host, else the
// local address a packet toward config.coordinator_host leaves from. UNAVAILABLE when none
// can be found (naming HORA_GLOO_IFACE, which sets it).
StatusOr<std::string> BindAddress(const BackendConfig& config);

}  // namespace hora

#endif  // HORA_COLLECTIVES_ADDRESS_H_
