// AddressExchange over PMIx, the process-management service Open MPI's mpirun (and Slurm's
// srun with --mpi=pmix) runs beside every process it starts.
#ifndef HORA_RUNTIME_BOOTSTRAP_PMIX_PMIX_EXCHANGE_H_
#define HORA_RUNTIME_BOOTSTRAP_PMIX_PMIX_EXCHANGE_H_

#include <memory>

#include "runtime/bootstrap/address_exchange.h"

namespace hora {

// PMIx_Init; Unavailable with PMIx's reason when there is no PMIx server to talk to.
StatusOr<std::unique_ptr<AddressExchange>> OpenPmixExchange();

}  // namespace hora

#endif  // HORA_RUNTIME_BOOTSTRAP_PMIX_PMIX_EXCHANGE_H_
