// BatchCopier::Create on a machine without a usable GPU (CI: the CUDA toolkit, no driver or no
// device) returns a clear error naming the CUDA error, promptly: no crash, no hang. On a
// machine with a GPU it must instead succeed. Whether there is one is asked of the driver
// itself (libcuda.so.1's cuInit and cuDeviceGetCount, loaded here with dlopen), not of
// /proc/driver/nvidia, which a sandboxed GPU machine may not have; HORA_TEST_EXPECT_GPU=1 or 0
// (set by tools/gpu_check.sh) overrides that probe. Not tagged gpu: it runs everywhere CUDA
// is built.
#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <future>
#include <string>

#include "collectives/cuda/batch_copy.h"
#include "tests/harness/hang_bound.h"

namespace hora {
namespace cuda {
namespace {

// True when the CUDA driver loads, initialises and counts at least one device.
bool DriverSeesADevice() {
  if (const char* e = std::getenv("HORA_TEST_EXPECT_GPU")) return std::string(e) == "1";
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return false;
  using InitFn = int (*)(unsigned);
  using CountFn = int (*)(int*);
  auto init = reinterpret_cast<InitFn>(dlsym(lib, "cuInit"));
  auto count = reinterpret_cast<CountFn>(dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  const bool seen = init != nullptr && count != nullptr && init(0) == 0 && count(&n) == 0 && n > 0;
  dlclose(lib);
  return seen;
}

TEST_CASE("BatchCopier::Create without a GPU fails with the CUDA error, without hanging") {
  auto result = std::async(std::launch::async, [] { return BatchCopier::Create(0); });
  // The runtime's initialisation bounds itself; HangBound fails a wait that never returns.
  REQUIRE(result.wait_for(testing::HangBound(std::chrono::seconds(5))) ==
          std::future_status::ready);
  StatusOr<std::unique_ptr<BatchCopier>> c = result.get();
  INFO("Create(0): " << c.status().ToString());
  if (DriverSeesADevice()) {
    CHECK(c.ok());  // the driver sees a device: the copier must work on it
    return;
  }
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().code() == Code::kUnavailable);
  const std::string& m = c.status().message();
  const bool names_error = m.find("CUDA driver version is insufficient") != std::string::npos ||
                           m.find("no CUDA-capable device") != std::string::npos ||
                           m.find("no CUDA device") != std::string::npos;
  CHECK(names_error);
  CHECK(m.find("cudaGetDeviceCount") != std::string::npos);
  // A second call gives the same answer (the runtime's failed initialisation is not a crash).
  CHECK(BatchCopier::Create(0).status().code() == Code::kUnavailable);
  CHECK(std::string(BuiltArchitectures()) == "sm_80 sm_90 compute_90");
}

}  // namespace
}  // namespace cuda
}  // namespace hora
