// NCCL, loaded at run time: libhora.so has no link-time dependency on libnccl (nor on the CUDA
// driver), so it loads on machines without NCCL, CUDA or a GPU, and the NCCL that the
// environment brings (the `nvidia-nccl` wheel torch depends on, or CUDA's) is the one used.
//
// Search order, first hit wins:
//   1. $HORA_NCCL_LIBRARY: a path to libnccl.so.2. When set, nothing else is tried (a wrong
//      path is an error naming it, never a silent fallback to another NCCL). The Python
//      package sets it, when unset, to the nvidia-nccl wheel's library (hora/_lib.py).
//   2. "libnccl.so.2" through the default loader path (LD_LIBRARY_PATH, ld.so.cache, rpath).
//   3. /usr/local/cuda/lib64/libnccl.so.2.
// The library must export every function of NcclApi (NCCL >= 2.14: non-blocking
// communicators, ncclCommInitRankConfig); one that does not is refused, naming the symbol.
//
// Thread safety: LoadNccl loads once per process (the first call decides); thread-safe.
// The table is never unloaded.
#ifndef HORA_COLLECTIVES_NCCL_NCCL_LOADER_H_
#define HORA_COLLECTIVES_NCCL_NCCL_LOADER_H_

#include <nccl.h>

#include <functional>
#include <string>
#include <vector>

#include "common/status.h"

namespace hora {

// The NCCL functions Hora calls, resolved with dlsym.
struct NcclApi {
  ncclResult_t (*GetVersion)(int*);
  const char* (*GetErrorString)(ncclResult_t);
  const char* (*GetLastError)(ncclComm_t);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRankConfig)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*);
  ncclResult_t (*CommFinalize)(ncclComm_t);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*CommAbort)(ncclComm_t);
  ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t*);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*GroupStart)();
  ncclResult_t (*GroupEnd)();

  int version = 0;   // ncclGetVersion's code, e.g. 22809 for 2.28.9
  std::string path;  // the file it was loaded from
};

// What loading found: the table, or why there is none (every place tried and its error).
struct NcclLoadResult {
  const NcclApi* api = nullptr;  // null when NCCL could not be loaded
  Status status;                 // OK iff api != nullptr
};

// The variable naming the NCCL library to load (read through BackendConfig::env).
constexpr const char kEnvNcclLibrary[] = "HORA_NCCL_LIBRARY";

// Loads NCCL on the first call (see the search order above); later calls return the same.
// env: the environment as runtime/options.cc reads it (BackendConfig::env; empty = none).
const NcclLoadResult& LoadNccl(const std::function<const char*(const char*)>& env);

// The search itself, uncached, with the value of HORA_NCCL_LIBRARY given (null = unset):
// for tests. The returned table is leaked on success (libraries are never unloaded).
NcclLoadResult LoadNcclFrom(const char* env_path);

// "2.28.9" for 22809 (codes below 10000 use NCCL's old encoding: 2708 is 2.7.8).
std::string NcclVersionString(int code);

}  // namespace hora

#endif  // HORA_COLLECTIVES_NCCL_NCCL_LOADER_H_
