// IPv4 addresses of this host's network interfaces, for the address rank 0's coordinator
// listens on (HORA_COORDINATOR_IFACE and the rules in runtime/options.h).
#ifndef HORA_RUNTIME_INTERFACE_ADDRESS_H_
#define HORA_RUNTIME_INTERFACE_ADDRESS_H_

#include <string>

#include "common/status.h"

namespace hora {

// The IPv4 address of the first interface in `names` ("eth0" or "ib0,eth0") that has one,
// as horarun's --network-interface chooses. InvalidArgument naming `var`, the value and the
// interfaces that do have an address when none of them has one.
StatusOr<std::string> InterfaceAddress(const std::string& var, const std::string& names);

// The IPv4 address of the first interface that is up and not loopback, in the system's order;
// Unavailable when there is none.
StatusOr<std::string> FirstExternalAddress();

}  // namespace hora

#endif  // HORA_RUNTIME_INTERFACE_ADDRESS_H_
