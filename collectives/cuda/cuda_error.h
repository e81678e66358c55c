// CUDA runtime errors as hora Status: "cudaMalloc: out of memory (cudaErrorMemoryAllocation)".
//
// No device, or a driver too old for (or missing under) the runtime, is UNAVAILABLE; a bad
// device ordinal is INVALID_ARGUMENT; anything else is INTERNAL.
#ifndef HORA_COLLECTIVES_CUDA_CUDA_ERROR_H_
#define HORA_COLLECTIVES_CUDA_CUDA_ERROR_H_

#include <cuda_runtime_api.h>

#include <string>

#include "common/status.h"

namespace hora {
namespace cuda {

inline Status CudaStatus(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return Status::Ok();
  std::string m =
      std::string(call) + ": " + cudaGetErrorString(err) + " (" + cudaGetErrorName(err) + ")";
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemDriverMismatch:
      return Unavailable(std::move(m));
    case cudaErrorInvalidDevice:
      return InvalidArgument(std::move(m));
    default:
      return Internal(std::move(m));
  }
}

}  // namespace cuda
}  // namespace hora

#define HORA_CUDA_RETURN_IF_ERROR(call) \
  HORA_RETURN_IF_ERROR(::hora::cuda::CudaStatus((call), #call))

#endif  // HORA_COLLECTIVES_CUDA_CUDA_ERROR_H_
