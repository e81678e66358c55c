// The NCCL backend on a machine without a GPU (CI): the run-time loader (the search order,
// errors naming the path or the missing symbol), the registration for CUDA tensors, and a
// clear error from creating a communicator without a usable device. On a machine with a GPU
// the last case checks that creation succeeds instead. Needs NCCL installed where the loader
// looks (here: /usr/local/cuda/lib64, also on ld.so's path).
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>

#include "collectives/device.h"
#include "collectives/nccl/nccl_communicator.h"
#include "collectives/nccl/nccl_loader.h"
#include "collectives/registry.h"
#include "tests/harness/memory_store.h"

namespace hora {
namespace {

// The environment as the runtime passes it to backends (BackendConfig::env).
const char* Getenv(const char* name) { return std::getenv(name); }

TEST_CASE("the NCCL loader finds NCCL on the default path and reads its version") {
  NcclLoadResult r = LoadNcclFrom(nullptr);
  INFO(r.status.message());
  REQUIRE(r.api != nullptr);
  CHECK(r.status.ok());
  CHECK(r.api->version >= 21400);
  CHECK(r.api->path.find("libnccl.so") != std::string::npos);
  CHECK(std::ifstream(r.api->path).good());
  int v = 0;
  REQUIRE(r.api->GetVersion(&v) == ncclSuccess);
  CHECK(v == r.api->version);
  CHECK(std::string(r.api->GetErrorString(ncclInvalidArgument)).size() > 0);
}

TEST_CASE("HORA_NCCL_LIBRARY naming a missing file is an error naming the path") {
  NcclLoadResult r = LoadNcclFrom("/nonexistent/libnccl.so.2");
  CHECK(r.api == nullptr);
  CHECK(r.status.code() == Code::kFailedPrecondition);
  CHECK_THAT(r.status.message(), Catch::Contains("HORA_NCCL_LIBRARY=/nonexistent/libnccl.so.2"));
}

TEST_CASE("a library that is not NCCL is refused, naming the missing symbol") {
  NcclLoadResult r = LoadNcclFrom("libm.so.6");
  CHECK(r.api == nullptr);
  CHECK_THAT(r.status.message(), Catch::Contains("libm.so.6") && Catch::Contains("ncclGetVersion"));
}

TEST_CASE("the explicit path loads the NCCL the default search finds") {
  NcclLoadResult found = LoadNcclFrom(nullptr);
  REQUIRE(found.api != nullptr);
  NcclLoadResult r = LoadNcclFrom(found.api->path.c_str());
  INFO(r.status.message());
  REQUIRE(r.api != nullptr);
  CHECK(r.api->version == found.api->version);
}

TEST_CASE("NCCL version codes read as NCCL writes them") {
  CHECK(NcclVersionString(22809) == "2.28.9");
  CHECK(NcclVersionString(21400) == "2.14.0");
  CHECK(NcclVersionString(2708) == "2.7.8");
}

TEST_CASE("nccl is a built backend for CUDA tensors, and selections are checked") {
  CHECK(IsBackendBuilt("nccl"));
  CHECK(CheckSelection("nccl", Device::kCuda, "HORA_GPU_OPERATIONS").ok());
  CHECK(CheckSelection("auto", Device::kCuda, "HORA_GPU_OPERATIONS").ok());
  Status cpu = CheckSelection("nccl", Device::kCpu, "HORA_CPU_OPERATIONS");
  CHECK_THAT(cpu.message(), Catch::Contains("HORA_CPU_OPERATIONS=nccl") &&
                                Catch::Contains("serves cuda tensors, not cpu"));
  Status bogus = CheckSelection("bogus", Device::kCuda, "HORA_GPU_OPERATIONS");
  CHECK_THAT(bogus.message(), Catch::Contains("no backend 'bogus'"));
  std::string detail;
  CHECK(BackendLibraryVersion("nccl", Getenv, &detail) >= 21400);
  CHECK_THAT(detail, Catch::Contains("libnccl.so"));
  CHECK(BackendLibraryVersion("bogus", Getenv, &detail) == -1);
  CHECK_THAT(detail, Catch::Contains("not built"));
  CHECK(DeviceRuntimeFor(Device::kCuda) != nullptr);
}

TEST_CASE("NCCL reduces every dtype but int16 and uint16, and says so by name") {
  for (DataType t :
       {DataType::kUint8, DataType::kInt8, DataType::kInt32, DataType::kInt64, DataType::kFloat16,
        DataType::kBfloat16, DataType::kFloat32, DataType::kFloat64, DataType::kBool}) {
    INFO(DataTypeName(t));
    CHECK(NcclCanReduce(t).ok());
  }
  for (DataType t : {DataType::kInt16, DataType::kUint16}) {
    Status s = NcclCanReduce(t);
    CHECK(s.code() == Code::kInvalidArgument);
    CHECK_THAT(s.message(), Catch::Contains(DataTypeName(t)));
  }
  CHECK_THAT(NcclCanReduce(static_cast<DataType>(42)).message(), Catch::Contains("42"));
}

TEST_CASE("a communicator without a usable GPU fails naming cudaGetDeviceCount's answer") {
  const DeviceRuntime* cuda = DeviceRuntimeFor(Device::kCuda);
  REQUIRE(cuda != nullptr);
  MemoryStore store;
  NcclConfig c;
  c.store = &store;
  c.key_prefix = "t/";
  c.timeout = std::chrono::milliseconds(5000);
  auto comm = CreateNcclCommunicator(c);
  const Status probe = cuda->Probe(0);
  INFO("probe: " << probe.message() << "; describe: " << cuda->Describe());
  if (probe.ok()) {
    // A machine with a GPU: creation at size 1 works.
    INFO(comm.status().message());
    CHECK(comm.ok());
  } else {
    CHECK(comm.status().code() == Code::kFailedPrecondition);
    CHECK_THAT(comm.status().message(), Catch::Contains("cudaGetDeviceCount"));
    CHECK_THAT(cuda->Describe(), Catch::Contains("cudaGetDeviceCount"));
  }
  CHECK_THAT(cuda->Describe(), Catch::Contains("CUDA runtime"));
}

TEST_CASE("a bad rank is refused before anything is loaded or created") {
  NcclConfig c;
  c.rank = 2;
  c.size = 2;
  auto comm = CreateNcclCommunicator(c);
  CHECK(comm.status().code() == Code::kInvalidArgument);
  CHECK_THAT(comm.status().message(), Catch::Contains("rank 2 of size 2"));
}

}  // namespace
}  // namespace hora
