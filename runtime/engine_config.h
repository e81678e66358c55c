// Options to the configs of the parts the engine wires together: the one place where an
// option becomes a field of a sub-config.
#ifndef HORA_RUNTIME_ENGINE_CONFIG_H_
#define HORA_RUNTIME_ENGINE_CONFIG_H_

#include <string>

#include "coordinator/client.h"
#include "coordinator/service.h"
#include "runtime/options.h"

namespace hora {

CoordinatorConfig CoordinatorConfigFrom(const Options& o);
// `address`: where the coordinator listens (rank 0 knows its port only after starting it).
ClientConfig ClientConfigFrom(const Options& o, const std::string& address);
// The bound on every data-plane wait.
std::chrono::milliseconds CollectiveTimeout(const Options& o);
// "host" of "host:port" (brackets of an IPv6 literal removed).
std::string HostOf(const std::string& address);
// "host:port", "[host]:port" for an IPv6 literal.
std::string JoinHostPort(const std::string& host, int port);
// Where rank 0's coordinator listens (the rule in Options: HORA_COORDINATOR_IFACE's address;
// with an exchange, 127.0.0.1 on one host, else the first external interface's; 0.0.0.0 for
// a launcher's host name; else the address's own host), at the address's port or, with an
// exchange, at coordinator_listen_port. Reads the host's interfaces.
StatusOr<std::string> CoordinatorListenAddress(const Options& o);

}  // namespace hora

#endif  // HORA_RUNTIME_ENGINE_CONFIG_H_
