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

}  // namespace hora

#endif  // HORA_RUNTIME_ENGINE_CONFIG_H_
