// The C API over the Engine. Holds the one process-wide pointer to it.
#include "bindings/c/hora.h"

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "bindings/c/api_util.h"
#include "collectives/device.h"
#include "collectives/registry.h"
#include "common/mutex.h"
#include "runtime/engine.h"
#include "runtime/options.h"

namespace hora {
namespace capi {
namespace {

using hora::Code;
using hora::Engine;
using hora::Status;

Mutex g_mu;
std::shared_ptr<Engine> g_engine GUARDED_BY(g_mu);  // the running engine
std::shared_ptr<Engine> g_last GUARDED_BY(g_mu);  // the last one shut down (its handles stay valid)
bool g_was_shut_down GUARDED_BY(g_mu) = false;
// The sticky error's text, set once per engine (the error never changes once set), so a
// pointer hora_async_error handed out stays valid until hora_shutdown.
std::string g_async_message GUARDED_BY(g_mu);

thread_local std::string t_last_error;  // hora_last_error()

// Every change of g_engine or g_last bumps the generation (under g_mu). Each thread keeps its
// own references to both engines of the generation it last saw, so that a call looks them
// up without g_mu and without touching a shared reference count (an operation makes three
// such calls). The references keep the engines alive until the thread's next call after a
// change, or its exit: a thread in the middle of a call never loses its engine.
std::atomic<uint64_t> g_generation{1};
struct Engines {
  uint64_t generation = 0;
  std::shared_ptr<Engine> running, last;
};
thread_local Engines t_engines;

const Engines& CurrentEngines() {
  if (t_engines.generation != g_generation.load(std::memory_order_acquire)) {
    hora::MutexLock lock(&g_mu);
    t_engines.generation = g_generation.load(std::memory_order_relaxed);
    t_engines.running = g_engine;
    t_engines.last = g_last;
  }
  return t_engines;
}

// A process that exits with Hora still running (exit() from any thread, the end of main)
// shuts the engine down from an atexit handler. Without it the engine would go with g_engine's
// static destructor, which may run after the logger's statics are gone (the shutdown logs).
// Registered after the first engine started, so it runs before the statics that engine made.
void ShutdownAtExit() {
  (void)hora_shutdown();
  hora::MutexLock lock(&g_mu);
  g_last.reset();
  g_generation.fetch_add(1, std::memory_order_release);
}

}  // namespace

hora_status_t Fail(const Status& s) {
  t_last_error = s.message();
  return static_cast<hora_status_t>(s.code());
}

hora_status_t Fail(Code code, const std::string& message) { return Fail(Status(code, message)); }

hora_status_t Report(const Status& s) {
  if (s.ok()) {
    t_last_error.clear();
    return HORA_OK;
  }
  return Fail(s);
}

// The running engine, or an error status in *status.
Engine* Running(hora_status_t* status) {
  if (Engine* e = CurrentEngines().running.get()) return e;
  hora::MutexLock lock(&g_mu);
  *status = Fail(Code::kFailedPrecondition, g_was_shut_down
                                                ? "Hora has been shut down; call hora_init again"
                                                : "Hora is not initialized; call hora_init first");
  return nullptr;
}

// The engine whose handles are valid: the running one, else the last one shut down.
Engine* ForHandles(hora_status_t* status) {
  const Engines& engines = CurrentEngines();
  if (engines.running) return engines.running.get();
  if (engines.last) return engines.last.get();
  *status = Fail(Code::kFailedPrecondition, "Hora is not initialized; call hora_init first");
  return nullptr;
}

hora_status_t TopologyField(int32_t* out, int (*field)(const Engine&)) {
  if (out == nullptr) return Fail(Code::kInvalidArgument, "output pointer is NULL");
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  *out = field(*e);
  return HORA_OK;
}

// Builds a TensorSpec from the C tensor; checks pointers and the enum ranges.
hora_status_t ToSpec(const char* name, const hora_tensor_t* t, hora::CollectiveType c,
                     hora::TensorSpec* spec) {
  if (name == nullptr) return Fail(Code::kInvalidArgument, "name is NULL");
  if (t == nullptr)
    return Fail(Code::kInvalidArgument, std::string("tensor is NULL for '") + name + "'");
  if (t->ndim < 0 || t->ndim > 64) {
    return Fail(Code::kInvalidArgument,
                "ndim " + std::to_string(t->ndim) + " of '" + name + "' is out of range [0, 64]");
  }
  if (t->ndim > 0 && t->shape == nullptr) {
    return Fail(Code::kInvalidArgument, std::string("shape is NULL for '") + name + "'");
  }
  if (!hora::IsValidDataType(static_cast<int32_t>(t->dtype))) {
    return Fail(
        Code::kInvalidArgument,
        "unknown dtype " + std::to_string(static_cast<int>(t->dtype)) + " for '" + name + "'");
  }
  if (t->device != HORA_DEVICE_CPU && t->device != HORA_DEVICE_CUDA) {
    return Fail(
        Code::kInvalidArgument,
        "unknown device " + std::to_string(static_cast<int>(t->device)) + " for '" + name + "'");
  }
  spec->name = name;
  spec->collective = c;
  spec->dtype = static_cast<hora::DataType>(t->dtype);
  spec->shape.assign(t->shape, t->shape + t->ndim);
  spec->device = static_cast<hora::Device>(t->device);
  spec->device_index = t->device_index;
  return HORA_OK;
}

hora_status_t CheckOp(hora_reduce_op_t op) {
  if (!hora::IsValidReduceOp(static_cast<int32_t>(op))) {
    return Fail(Code::kInvalidArgument,
                "unknown reduce op " + std::to_string(static_cast<int>(op)));
  }
  return HORA_OK;
}

hora_status_t Submit(hora::TensorSpec spec, const void* in, void* out, void* stream,
                     hora_handle_t* handle, size_t out_bytes = 0) {
  if (handle == nullptr) return Fail(Code::kInvalidArgument, "handle pointer is NULL");
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  auto h = e->Enqueue(std::move(spec), in, out, stream, out_bytes);
  if (!h.ok()) return Fail(h.status());
  *handle = h.value();
  t_last_error.clear();
  return HORA_OK;
}

}  // namespace capi
}  // namespace hora

using namespace hora::capi;

extern "C" {

hora_status_t hora_init(const hora_config_t* config) {
  hora::OptionOverrides ov;
  if (config != nullptr) {
    if (config->struct_size < sizeof(size_t) || config->struct_size > 4096) {
      return Fail(Code::kInvalidArgument,
                  "config->struct_size must be sizeof(hora_config_t); use HORA_CONFIG_INITIALIZER");
    }
    ov.rank = config->rank;
    ov.size = config->size;
    if (config->coordinator_address) ov.coordinator_address = config->coordinator_address;
    if (config->token) ov.token = config->token;
    // A caller built against an older hora.h passes a shorter struct without the field.
    if (config->struct_size >= offsetof(hora_config_t, deterministic) + sizeof(int32_t) &&
        config->deterministic != 0) {
      ov.deterministic = config->deterministic > 0 ? 1 : 0;
    }
  }
  hora::MutexLock lock(&g_mu);
  if (g_engine) return Fail(Code::kFailedPrecondition, "Hora is already initialized");
  auto options = hora::OptionsFromEnvironment(ov);
  if (!options.ok()) return Fail(options.status());
  auto engine = Engine::Start(options.value());
  if (!engine.ok()) return Fail(engine.status());
  g_engine = std::move(engine).value();
  static const bool registered = std::atexit(ShutdownAtExit) == 0;
  (void)registered;
  g_last.reset();
  g_generation.fetch_add(1, std::memory_order_release);
  g_was_shut_down = false;
  g_async_message.clear();  // a new engine: the last one's pointers were valid until shutdown
  t_last_error.clear();
  return HORA_OK;
}

hora_status_t hora_shutdown(void) {
  std::shared_ptr<Engine> e;
  {
    hora::MutexLock lock(&g_mu);
    if (!g_engine) return HORA_OK;
    e = g_engine;
    g_engine.reset();
    g_last = e;
    g_generation.fetch_add(1, std::memory_order_release);
    g_was_shut_down = true;
  }
  return Report(e->Shutdown());
}

int hora_is_initialized(void) {
  hora::MutexLock lock(&g_mu);
  return g_engine ? 1 : 0;
}

hora_status_t hora_rank(int32_t* out) {
  return TopologyField(out, [](const Engine& e) { return e.self().rank; });
}
hora_status_t hora_size(int32_t* out) {
  return TopologyField(out, [](const Engine& e) { return e.options().size; });
}
hora_status_t hora_local_rank(int32_t* out) {
  return TopologyField(out, [](const Engine& e) { return e.self().local_rank; });
}
hora_status_t hora_local_size(int32_t* out) {
  return TopologyField(out, [](const Engine& e) { return e.self().local_size; });
}
hora_status_t hora_cross_rank(int32_t* out) {
  return TopologyField(out, [](const Engine& e) { return e.self().cross_rank; });
}
hora_status_t hora_cross_size(int32_t* out) {
  return TopologyField(out, [](const Engine& e) { return e.self().cross_size; });
}

namespace {

// The spec of a reduction (allreduce, reducescatter): the tensor's, and the op and scales.
hora_status_t ReductionSpec(const char* name, const hora_tensor_t* input, hora::CollectiveType type,
                            hora_reduce_op_t op, double prescale, double postscale,
                            int32_t process_set, hora::TensorSpec* spec) {
  if (hora_status_t s = ToSpec(name, input, type, spec)) return s;
  if (hora_status_t s = CheckOp(op)) return s;
  spec->op = static_cast<hora::ReduceOp>(op);
  spec->prescale = prescale;
  spec->postscale = postscale;
  spec->process_set = process_set;
  return HORA_OK;
}

}  // namespace

hora_status_t hora_allreduce_async(const char* name, const hora_tensor_t* input, void* output,
                                   hora_reduce_op_t op, double prescale, double postscale,
                                   int32_t process_set, hora_handle_t* handle) {
  hora::TensorSpec spec;
  if (hora_status_t s = ReductionSpec(name, input, hora::CollectiveType::kAllreduce, op, prescale,
                                      postscale, process_set, &spec)) {
    return s;
  }
  return Submit(std::move(spec), input->data, output, input->stream, handle);
}

hora_status_t hora_broadcast_async(const char* name, const hora_tensor_t* tensor, int32_t root,
                                   int32_t process_set, hora_handle_t* handle) {
  hora::TensorSpec spec;
  if (hora_status_t s = ToSpec(name, tensor, hora::CollectiveType::kBroadcast, &spec)) return s;
  spec.root = root;
  spec.process_set = process_set;
  return Submit(std::move(spec), tensor->data, tensor->data, tensor->stream, handle);
}

hora_status_t hora_allgather_async(const char* name, const hora_tensor_t* input,
                                   int32_t process_set, hora_handle_t* handle) {
  hora::TensorSpec spec;
  if (hora_status_t s = ToSpec(name, input, hora::CollectiveType::kAllgather, &spec)) return s;
  spec.process_set = process_set;
  return Submit(std::move(spec), input->data, nullptr, input->stream, handle);
}

hora_status_t hora_allgather_into_async(const char* name, const hora_tensor_t* input, void* output,
                                        size_t output_bytes, int32_t process_set,
                                        hora_handle_t* handle) {
  if (output == nullptr) return Fail(Code::kInvalidArgument, "output is NULL");
  hora::TensorSpec spec;
  if (hora_status_t s = ToSpec(name, input, hora::CollectiveType::kAllgather, &spec)) return s;
  spec.process_set = process_set;
  return Submit(std::move(spec), input->data, output, input->stream, handle, output_bytes);
}

hora_status_t hora_reducescatter_async(const char* name, const hora_tensor_t* input,
                                       hora_reduce_op_t op, double prescale, double postscale,
                                       int32_t process_set, hora_handle_t* handle) {
  hora::TensorSpec spec;
  if (hora_status_t s = ReductionSpec(name, input, hora::CollectiveType::kReducescatter, op,
                                      prescale, postscale, process_set, &spec)) {
    return s;
  }
  return Submit(std::move(spec), input->data, nullptr, input->stream, handle);
}

hora_status_t hora_reducescatter_into_async(const char* name, const hora_tensor_t* input,
                                            void* output, size_t output_bytes, hora_reduce_op_t op,
                                            double prescale, double postscale, int32_t process_set,
                                            hora_handle_t* handle) {
  if (output == nullptr) return Fail(Code::kInvalidArgument, "output is NULL");
  hora::TensorSpec spec;
  if (hora_status_t s = ReductionSpec(name, input, hora::CollectiveType::kReducescatter, op,
                                      prescale, postscale, process_set, &spec)) {
    return s;
  }
  return Submit(std::move(spec), input->data, output, input->stream, handle, output_bytes);
}

namespace {

hora_status_t AlltoallSpec(const char* name, const hora_tensor_t* input, const int64_t* splits,
                           int32_t nsplits, int32_t process_set, hora::TensorSpec* spec) {
  if (hora_status_t s = ToSpec(name, input, hora::CollectiveType::kAlltoall, spec)) return s;
  if (splits != nullptr) {
    if (nsplits < 0 || nsplits > (1 << 20)) {
      return Fail(Code::kInvalidArgument,
                  "nsplits " + std::to_string(nsplits) + " is out of range");
    }
    spec->splits.assign(splits, splits + nsplits);
  } else if (nsplits != 0) {
    return Fail(Code::kInvalidArgument, "splits is NULL but nsplits is " + std::to_string(nsplits));
  }
  spec->process_set = process_set;
  return HORA_OK;
}

}  // namespace

hora_status_t hora_alltoall_async(const char* name, const hora_tensor_t* input,
                                  const int64_t* splits, int32_t nsplits, int32_t process_set,
                                  hora_handle_t* handle) {
  hora::TensorSpec spec;
  if (hora_status_t s = AlltoallSpec(name, input, splits, nsplits, process_set, &spec)) return s;
  return Submit(std::move(spec), input->data, nullptr, input->stream, handle);
}

hora_status_t hora_alltoall_into_async(const char* name, const hora_tensor_t* input,
                                       const int64_t* splits, int32_t nsplits, void* output,
                                       size_t output_bytes, int32_t process_set,
                                       hora_handle_t* handle) {
  if (output == nullptr) return Fail(Code::kInvalidArgument, "output is NULL");
  hora::TensorSpec spec;
  if (hora_status_t s = AlltoallSpec(name, input, splits, nsplits, process_set, &spec)) return s;
  return Submit(std::move(spec), input->data, output, input->stream, handle, output_bytes);
}

const char* hora_error_string(hora_status_t status) {
  if (static_cast<int>(status) < 0 || static_cast<int>(status) > HORA_IN_PROGRESS) return "UNKNOWN";
  return hora::CodeName(static_cast<Code>(status));
}

hora_status_t hora_start_timeline(const char* file_path, int mark_cycles) {
  if (file_path == nullptr || *file_path == '\0') {
    return Fail(Code::kInvalidArgument, "start_timeline: the file path is NULL or empty");
  }
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  return Report(e->StartTimeline(file_path, mark_cycles != 0));
}

hora_status_t hora_stop_timeline(void) {
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  return Report(e->StopTimeline());
}

hora_status_t hora_autotune_state(int64_t* fusion_threshold_bytes, double* cycle_time_ms,
                                  int32_t* trial, int* done) {
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  const hora::TuningNotice t = e->Tuning();
  if (fusion_threshold_bytes != nullptr) *fusion_threshold_bytes = t.fusion_threshold_bytes;
  if (cycle_time_ms != nullptr) *cycle_time_ms = static_cast<double>(t.cycle_time_us) / 1000.0;
  if (trial != nullptr) *trial = t.trial;
  if (done != nullptr) *done = t.done ? 1 : 0;
  return HORA_OK;
}

const char* hora_last_error(void) { return t_last_error.c_str(); }

hora_status_t hora_async_error(const char** message) {
  hora::MutexLock lock(&g_mu);
  Status s = g_engine ? g_engine->AsyncError() : Status::Ok();
  if (g_async_message.empty() && !s.ok()) g_async_message = s.message();
  if (message != nullptr) *message = s.ok() ? "" : g_async_message.c_str();
  return static_cast<hora_status_t>(s.code());
}

const char* hora_version(void) { return "0.2.0"; }  // = horarun --version, the wheel

int hora_built(const char* backend) {
  if (backend == nullptr) return 0;
  if (std::string(backend) == "cuda") {
    return hora::DeviceRuntimeFor(hora::Device::kCuda) != nullptr ? 1 : 0;
  }
  return hora::IsBackendBuilt(backend) ? 1 : 0;
}

int hora_nccl_version(const char** detail) {
  static hora::Mutex mu;
  static std::string text;
  hora::MutexLock lock(&mu);
  std::string d;
  const int v = hora::BackendLibraryVersion("nccl", hora::ProcessEnvironment(), &d);
  text = d;
  if (detail != nullptr) *detail = text.c_str();
  return v > 0 ? v : 0;
}

const char* hora_cuda_info(void) {
  static hora::Mutex mu;
  static std::string text;
  hora::MutexLock lock(&mu);
  const hora::DeviceRuntime* cuda = hora::DeviceRuntimeFor(hora::Device::kCuda);
  text = cuda != nullptr ? cuda->Describe() : "";
  return text.c_str();
}

const char* hora_built_backends(void) {
  static const std::string list = [] {
    std::string s;
    for (const std::string& n : hora::BuiltBackends()) s += (s.empty() ? "" : ",") + n;
    return s;
  }();
  return list.c_str();
}

}  // extern "C"
