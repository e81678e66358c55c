// BatchCopier::Create on a machine without a usable GPU (CI: the CUDA toolkit, no driver or no
// device) returns a clear error naming the CUDA error, promptly: no crash, no hang. On a
// machine with a GPU (a driver is installed: /proc/driver/nvidia/version exists) it must
// instead succeed and copy a few bytes. Not tagged gpu: it runs everywhere CUDA is built.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <string>

#include "collectives/cuda/batch_copy.h"
#include "tests/harness/hang_bound.h"

namespace hora {
namespace cuda {
namespace {

bool HasNvidiaDriver() { return access("/proc/driver/nvidia/version", F_OK) == 0; }

TEST_CASE("BatchCopier::Create without a GPU fails with the CUDA error, without hanging") {
  auto result = std::async(std::launch::async, [] { return BatchCopier::Create(0); });
  // The runtime's initialisation bounds itself; HangBound fails a wait that never returns.
  REQUIRE(result.wait_for(testing::HangBound(std::chrono::seconds(5))) ==
          std::future_status::ready);
  StatusOr<std::unique_ptr<BatchCopier>> c = result.get();
  INFO("Create(0): " << c.status().ToString());
  if (HasNvidiaDriver()) {
    CHECK(c.ok());  // a driver is installed: the device must work
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
