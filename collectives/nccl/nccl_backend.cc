// Registers the NCCL backend for CUDA tensors.
//
// "nccl" is in BuiltBackends() whenever this build compiled it in (like every backend: the
// list says what the build has). Whether the NCCL library can be loaded on this machine is a
// run-time fact: hora_nccl_version() (0 and the reason when it cannot), --check-build, and
// can_serve, which refuses a set with the loader's reason (so HORA_GPU_OPERATIONS=nccl on a
// machine without NCCL fails naming the paths tried).
#include "collectives/cuda/cuda_device.h"
#include "collectives/device.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/nccl/nccl_loader.h"
#include "collectives/registry.h"

namespace hora {
namespace {

BackendInfo NcclInfo() {
  BackendInfo info;
  info.name = "nccl";
  info.device = Device::kCuda;
  info.auto_priority = 10;
  info.can_serve = [](const BackendConfig& c) -> Status {
    const NcclLoadResult& nccl = LoadNccl(c.env);
    if (nccl.api == nullptr) return nccl.status;
    return CudaRuntime()->Probe(c.device_index);
  };
  info.can_reduce = NcclCanReduce;
  info.create = [](const BackendConfig& c) {
    NcclConfig nc;
    nc.rank = c.rank;
    nc.size = c.size();
    nc.device = c.device_index;
    nc.store = c.store;
    nc.key_prefix = c.key_prefix;
    nc.timeout = c.timeout;
    nc.env = c.env;
    return CreateNcclCommunicator(nc);
  };
  info.library = [](const std::function<const char*(const char*)>& env, std::string* detail) {
    const NcclLoadResult& nccl = LoadNccl(env);
    if (nccl.api == nullptr) {
      *detail = nccl.status.message();
      return 0;
    }
    *detail = nccl.api->path;
    return nccl.api->version;
  };
  return info;
}

}  // namespace

HORA_REGISTER_BACKEND(NcclInfo());

}  // namespace hora
