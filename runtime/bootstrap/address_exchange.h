// How rank 0's coordinator address reaches the other ranks when no launcher variable carries
// it: through a key-value service of the launcher (PMIx under Open MPI's mpirun). The engine
// uses one before its coordinator client connects (Options::coordinator_exchange).
#ifndef HORA_RUNTIME_BOOTSTRAP_ADDRESS_EXCHANGE_H_
#define HORA_RUNTIME_BOOTSTRAP_ADDRESS_EXCHANGE_H_

#include <chrono>
#include <memory>
#include <string>

#include "common/status.h"

namespace hora {

class AddressExchange {
 public:
  virtual ~AddressExchange() = default;

  // The launcher's rank of this process (for the check that it is Hora's rank).
  virtual int rank() const = 0;

  // Collective over every process of the job, once: rank 0 passes its address ("host:port")
  // and gets it back; every other rank passes "" and gets rank 0's. Blocks up to `timeout`;
  // past it, DeadlineExceeded naming the launcher's service. Not thread-safe.
  virtual StatusOr<std::string> Exchange(const std::string& address,
                                         std::chrono::milliseconds timeout) = 0;
};

// Connects to the named service ("pmix"). Unavailable when it cannot be reached (the process
// was not started by a launcher that runs it); InvalidArgument for an unknown name.
StatusOr<std::unique_ptr<AddressExchange>> OpenAddressExchange(const std::string& kind);

}  // namespace hora

#endif  // HORA_RUNTIME_BOOTSTRAP_ADDRESS_EXCHANGE_H_
