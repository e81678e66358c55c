#include "common/status.h"

namespace hora {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Code::kMismatch:
      return "MISMATCH";
    case Code::kPeerFailure:
      return "PEER_FAILURE";
    case Code::kUnauthenticated:
      return "UNAUTHENTICATED";
    case Code::kUnavailable:
      return "UNAVAILABLE";
    case Code::kInternal:
      return "INTERNAL";
    case Code::kAborted:
      return "ABORTED";
    case Code::kInProgress:
      return "IN_PROGRESS";
  }
  return "UNKNOWN";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

}  // namespace hora
