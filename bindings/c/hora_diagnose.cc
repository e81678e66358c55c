// hora.h "Diagnosis": the on-demand request and the language runtime's hook.
#include <cmath>
#include <string>

#include "bindings/c/api_util.h"
#include "bindings/c/hora.h"

using hora::Code;
using hora::capi::Fail;
using hora::capi::Report;
using hora::capi::Running;

extern "C" {

hora_status_t hora_diagnose(void) {
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  if (e->options().diagnose_s <= 0) {
    return Fail(Code::kFailedPrecondition,
                "diagnose: the diagnosis is off (HORA_DIAGNOSE_SECONDS=0)");
  }
  e->DiagnoseNow("hora_diagnose()");
  return Report(hora::Status::Ok());
}

hora_status_t hora_diagnosis_wait(double timeout_seconds, int64_t* request) {
  if (request == nullptr) return Fail(Code::kInvalidArgument, "diagnosis_wait: request is NULL");
  if (!std::isfinite(timeout_seconds) || timeout_seconds < 0 || timeout_seconds > 3600) {
    return Fail(
        Code::kInvalidArgument,
        "diagnosis_wait: timeout " + std::to_string(timeout_seconds) + " s is not in [0, 3600]");
  }
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  const int64_t id = e->diagnosis().WaitForPython(
      std::chrono::milliseconds(static_cast<int64_t>(timeout_seconds * 1000)));
  if (id < 0) return Fail(Code::kFailedPrecondition, "diagnosis_wait: Hora is shutting down");
  if (id == 0) return Fail(Code::kDeadlineExceeded, "diagnosis_wait: no request");
  *request = id;
  return Report(hora::Status::Ok());
}

hora_status_t hora_diagnosis_answer(int64_t request, const char* where, const char* stacks) {
  if (request <= 0) {
    return Fail(Code::kInvalidArgument,
                "diagnosis_answer: request " + std::to_string(request) + " is not positive");
  }
  hora_status_t st = HORA_OK;
  auto e = Running(&st);
  if (!e) return st;
  e->diagnosis().AnswerPython(request, where ? where : "", stacks ? stacks : "");
  return Report(hora::Status::Ok());
}

}  // extern "C"
