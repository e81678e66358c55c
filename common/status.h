// Status and StatusOr: how every layer of Hora reports a failure.
//
// Policy (see docs/errors.md): a recoverable failure (bad input, a timeout, a dead peer, a
// mismatched tensor) is a Status returned to the caller. A broken internal invariant is a
// HORA_CHECK, which logs and aborts. No exception crosses a module or the C boundary.
//
// The numeric codes are stable: bindings/c/hora.h exposes the same numbers as hora_status_t.
#ifndef HORA_COMMON_STATUS_H_
#define HORA_COMMON_STATUS_H_

#include <optional>
#include <string>
#include <utility>

namespace hora {

enum class Code : int {
  kOk = 0,
  kInvalidArgument = 1,     // the caller passed something wrong; the message names it
  kFailedPrecondition = 2,  // the call is not allowed now (before init, after shutdown, ...)
  kAlreadyExists = 3,       // a tensor with that name is already in flight
  kNotFound = 4,            // unknown handle or key
  kDeadlineExceeded = 5,    // a wait ran past its deadline
  kMismatch = 6,            // ranks submitted different signatures for one tensor
  kPeerFailure = 7,         // another rank or the coordinator died or aborted the job
  kUnauthenticated = 8,     // wrong job token
  kUnavailable = 9,         // a connection could not be made
  kInternal = 10,           // a bug or an unexpected backend error
  kAborted = 11,            // shut down while pending, or the job aborted (a stall timeout)
  kInProgress = 12,         // poll: not done yet (never an error)
};

const char* CodeName(Code code);

// [[nodiscard]]: a call whose Status is dropped does not compile (.bazelrc builds with
// -Werror=unused-result). Where ignoring one is right, write `(void)` and say why.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: root 5 is out of range [0, 4)"
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) {
  return Status(Code::kInvalidArgument, std::move(m));
}
inline Status FailedPrecondition(std::string m) {
  return Status(Code::kFailedPrecondition, std::move(m));
}
inline Status DeadlineExceeded(std::string m) {
  return Status(Code::kDeadlineExceeded, std::move(m));
}
inline Status PeerFailure(std::string m) { return Status(Code::kPeerFailure, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
inline Status Aborted(std::string m) { return Status(Code::kAborted, std::move(m)); }

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(Status status) : status_(std::move(status)) {}  // NOLINT: implicit by design
  StatusOr(T value) : value_(std::move(value)) {}          // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  // REQUIRES: ok()
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace hora

#define HORA_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::hora::Status _hora_status = (expr);        \
    if (!_hora_status.ok()) return _hora_status; \
  } while (0)

#endif  // HORA_COMMON_STATUS_H_
