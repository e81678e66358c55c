#include "collectives/nccl/nccl_loader.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>

namespace hora {
namespace {

constexpr const char kCudaNccl[] = "/usr/local/cuda/lib64/libnccl.so.2";
constexpr int kMinVersion = 21400;  // ncclCommInitRankConfig with non-blocking communicators

template <typename F>
bool Resolve(void* lib, const char* symbol, F* fn, std::string* missing) {
  *fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (*fn == nullptr && missing->empty()) *missing = symbol;
  return *fn != nullptr;
}

// Opens `file` and resolves the table; on failure *why says what went wrong.
std::unique_ptr<NcclApi> TryOpen(const std::string& file, std::string* why) {
  void* lib = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    *why = e != nullptr ? e : "dlopen failed";
    return nullptr;
  }
  auto api = std::make_unique<NcclApi>();
  std::string missing;
  Resolve(lib, "ncclGetVersion", &api->GetVersion, &missing);
  Resolve(lib, "ncclGetErrorString", &api->GetErrorString, &missing);
  Resolve(lib, "ncclGetLastError", &api->GetLastError, &missing);
  Resolve(lib, "ncclGetUniqueId", &api->GetUniqueId, &missing);
  Resolve(lib, "ncclCommInitRankConfig", &api->CommInitRankConfig, &missing);
  Resolve(lib, "ncclCommFinalize", &api->CommFinalize, &missing);
  Resolve(lib, "ncclCommDestroy", &api->CommDestroy, &missing);
  Resolve(lib, "ncclCommAbort", &api->CommAbort, &missing);
  Resolve(lib, "ncclCommGetAsyncError", &api->CommGetAsyncError, &missing);
  Resolve(lib, "ncclAllReduce", &api->AllReduce, &missing);
  Resolve(lib, "ncclBroadcast", &api->Broadcast, &missing);
  Resolve(lib, "ncclReduceScatter", &api->ReduceScatter, &missing);
  Resolve(lib, "ncclReduce", &api->Reduce, &missing);
  Resolve(lib, "ncclAllGather", &api->AllGather, &missing);
  Resolve(lib, "ncclSend", &api->Send, &missing);
  Resolve(lib, "ncclRecv", &api->Recv, &missing);
  Resolve(lib, "ncclGroupStart", &api->GroupStart, &missing);
  Resolve(lib, "ncclGroupEnd", &api->GroupEnd, &missing);
  if (!missing.empty()) {
    *why = "it does not export " + missing + " (NCCL older than 2.14?)";
    dlclose(lib);
    return nullptr;
  }
  int version = 0;
  if (api->GetVersion(&version) != ncclSuccess || version < kMinVersion) {
    *why = "its version " + NcclVersionString(version) + " is older than " +
           NcclVersionString(kMinVersion);
    dlclose(lib);
    return nullptr;
  }
  api->version = version;
  char resolved[4096];
  // dlinfo would give the loaded path; the path of a symbol in it is as good and portable.
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(api->GetVersion), &info) != 0 && info.dli_fname != nullptr &&
      realpath(info.dli_fname, resolved) != nullptr) {
    api->path = resolved;
  } else {
    api->path = file;
  }
  return api;
}

}  // namespace

std::string NcclVersionString(int code) {
  if (code <= 0) return std::to_string(code);
  if (code < 10000) {
    return std::to_string(code / 1000) + "." + std::to_string(code % 1000 / 100) + "." +
           std::to_string(code % 100);
  }
  return std::to_string(code / 10000) + "." + std::to_string(code % 10000 / 100) + "." +
         std::to_string(code % 100);
}

NcclLoadResult LoadNcclFrom(const char* env_path) {
  NcclLoadResult result;
  std::string why;
  if (env_path != nullptr && *env_path != '\0') {
    std::unique_ptr<NcclApi> api = TryOpen(env_path, &why);
    if (!api) {
      result.status = FailedPrecondition(std::string("cannot load NCCL from ") + kEnvNcclLibrary +
                                         "=" + env_path + ": " + why);
      return result;
    }
    result.api = api.release();
    return result;
  }
  std::string tried;
  for (const char* file : {"libnccl.so.2", kCudaNccl}) {
    std::unique_ptr<NcclApi> api = TryOpen(file, &why);
    if (api) {
      result.api = api.release();
      return result;
    }
    tried += std::string(tried.empty() ? "" : "; ") + file + ": " + why;
  }
  result.status = FailedPrecondition(std::string("NCCL not found (set ") + kEnvNcclLibrary +
                                     " to libnccl.so.2; tried " + tried + ")");
  return result;
}

const NcclLoadResult& LoadNccl(const std::function<const char*(const char*)>& env) {
  static const NcclLoadResult* loaded =
      new NcclLoadResult(LoadNcclFrom(env ? env(kEnvNcclLibrary) : nullptr));
  return *loaded;
}

}  // namespace hora
