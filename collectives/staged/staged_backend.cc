// Registers the staging of CUDA tensors through host memory (collectives/registry.h,
// "Staging"): HORA_GPU_OPERATIONS naming a CPU backend runs CUDA tensors on it.
#include "collectives/cuda/cuda_device.h"
#include "collectives/registry.h"
#include "collectives/staged/staged_communicator.h"

namespace hora {
namespace {

StagingInfo CudaStaging() {
  StagingInfo info;
  info.device = Device::kCuda;
  info.can_serve = [](const BackendConfig& c) { return CudaRuntime()->Probe(c.device_index); };
  info.wrap = [](std::unique_ptr<Communicator> host, const BackendConfig& c) {
    StagedConfig sc;
    sc.device = c.device_index;
    sc.timeout = c.timeout;
    return CreateStagedCommunicator(std::move(host), sc);
  };
  return info;
}

const bool registered [[maybe_unused]] = RegisterStaging(CudaStaging());

}  // namespace
}  // namespace hora
