// A shared library built like libhora.so around //collectives/cuda:batch_copy, for
// cuda_link_test.sh: it must load on a machine without CUDA or a GPU, and need no libcudart.
#include "collectives/cuda/batch_copy.h"

// The status code of BatchCopier::Create(0): 0 with a usable GPU, UNAVAILABLE (9) without.
extern "C" __attribute__((visibility("default"))) int hora_cuda_probe_create() {
  return static_cast<int>(hora::cuda::BatchCopier::Create(0).status().code());
}
