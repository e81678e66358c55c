// How a Hora (dtype, op) reduction is expressed to MPI.
//
// Types MPI reduces natively map to its predefined datatype and op: uint8, int8, int32,
// int64, float32 and float64 with MPI_SUM / MPI_MIN / MPI_MAX / MPI_PROD; bool (one byte,
// 0 or 1) as MPI_UINT8_T with MPI_LOR for sum and max and MPI_LAND for min and product,
// Hora's own bool semantics (common/reduce.h). float16 and bfloat16, which MPI has no type
// for, travel as MPI_UINT16_T with user ops (MPI_Op_create, commutative) that call Hora's
// ReduceInto, so they round exactly as the other CPU backends do.
//
// The user ops are created once per process, after MPI_Init, and never freed (MPI frees
// them at MPI_Finalize). Thread-safe.
#ifndef HORA_COLLECTIVES_MPI_MPI_REDUCE_H_
#define HORA_COLLECTIVES_MPI_MPI_REDUCE_H_

#include <mpi.h>

#include "common/status.h"
#include "common/types.h"

namespace hora {

struct MpiReduction {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
};

// REQUIRES: MPI is initialized (collectives/mpi/mpi_environment.h).
// INVALID_ARGUMENT for an invalid dtype or an op other than sum, min, max, product (average
// is a sum with a postscale, applied by the runtime).
StatusOr<MpiReduction> MpiReductionFor(DataType dtype, ReduceOp op);

}  // namespace hora

#endif  // HORA_COLLECTIVES_MPI_MPI_REDUCE_H_
