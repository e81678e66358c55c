// Diagnosis messages <-> their plain structs (convert.h).
#include <algorithm>

#include "coordinator/convert.h"

namespace hora {
namespace {

constexpr size_t kMaxDetail = 1 << 20;
constexpr size_t kMaxLine = 4096;
constexpr int kMaxPending = 256;

std::string Bounded(const std::string& s, size_t cap) {
  return s.size() <= cap ? s : s.substr(0, cap) + "... (cut)";
}

}  // namespace

void ToProto(const DiagnosisRequest& request, proto::CoordinatorMessage::Diagnose* out) {
  out->set_id(request.id);
  out->set_reason(request.reason);
  out->set_deadline_ms(request.deadline.count());
}

Status FromProto(const proto::CoordinatorMessage::Diagnose& in, DiagnosisRequest* out) {
  if (in.deadline_ms() < 0) {
    return InvalidArgument("diagnose: negative deadline " + std::to_string(in.deadline_ms()));
  }
  out->id = in.id();
  out->reason = Bounded(in.reason(), kMaxLine);
  out->deadline = std::chrono::milliseconds(in.deadline_ms());
  return Status::Ok();
}

void ToProto(const DiagnosisReport& report, proto::DiagnosisReport* out) {
  out->set_id(report.id);
  out->set_where(report.where);
  out->set_python(static_cast<int32_t>(report.python));
  out->set_python_wait_ms(report.python_wait.count());
  out->set_last_completed(report.last_completed);
  for (const std::string& p : report.pending) out->add_pending(p);
  out->set_detail(report.detail);
}

Status FromProto(const proto::DiagnosisReport& in, DiagnosisReport* out) {
  if (in.python() < 0 || in.python() > 2) {
    return InvalidArgument("diagnosis report: python state " + std::to_string(in.python()) +
                           " is not 0, 1 or 2");
  }
  out->id = in.id();
  out->where = Bounded(in.where(), kMaxLine);
  out->python = static_cast<DiagnosisReport::Python>(in.python());
  out->python_wait = std::chrono::milliseconds(std::max<int64_t>(0, in.python_wait_ms()));
  out->last_completed = Bounded(in.last_completed(), kMaxLine);
  out->pending.clear();
  for (int i = 0; i < in.pending_size() && i < kMaxPending; ++i) {
    out->pending.push_back(Bounded(in.pending(i), kMaxLine));
  }
  if (in.pending_size() > kMaxPending) {
    out->pending.push_back("... and " + std::to_string(in.pending_size() - kMaxPending) + " more");
  }
  out->detail = Bounded(in.detail(), kMaxDetail);
  return Status::Ok();
}

}  // namespace hora
