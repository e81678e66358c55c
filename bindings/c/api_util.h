// Internal to bindings/c: what the files implementing hora.h share (the engine pointer, the
// per-thread last error, argument checks). Not installed; frameworks include hora.h only.
#ifndef HORA_BINDINGS_C_API_UTIL_H_
#define HORA_BINDINGS_C_API_UTIL_H_

#include <memory>
#include <string>

#include "bindings/c/hora.h"
#include "common/status.h"
#include "runtime/engine.h"

namespace hora {
namespace capi {

// Sets the calling thread's last error and returns the status as hora_status_t.
hora_status_t Fail(const Status& s);
hora_status_t Fail(Code code, const std::string& message);
// HORA_OK (clearing the last error) or Fail(s).
hora_status_t Report(const Status& s);
// The running engine, or nullptr with the error in *status. The pointer stays valid for the
// rest of the calling thread's call.
Engine* Running(hora_status_t* status);
// The engine whose handles are valid: the running one, else the last one shut down; nullptr
// with the error in *status before the first hora_init.
Engine* ForHandles(hora_status_t* status);
// A TensorSpec from the C tensor: checks pointers and the enum ranges.
hora_status_t ToSpec(const char* name, const hora_tensor_t* t, CollectiveType c, TensorSpec* spec);

// Returns the handle of what `enqueue` produced (or its error).
template <typename Fn>
hora_status_t EnqueueWith(hora_handle_t* handle, Fn enqueue) {
  if (handle == nullptr) return Fail(Code::kInvalidArgument, "handle pointer is NULL");
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  hora::StatusOr<int64_t> h = enqueue(*e);
  if (!h.ok()) return Fail(h.status());
  *handle = h.value();
  return Report(Status::Ok());
}

// Runs fn on the running engine's view of process set `id`.
template <typename Fn>
hora_status_t WithSet(int32_t id, Fn fn) {
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  auto info = e->ProcessSet(id);
  if (!info.ok()) return Fail(info.status());
  return Report(fn(info.value()));
}

}  // namespace capi
}  // namespace hora

#endif  // HORA_BINDINGS_C_API_UTIL_H_
