// Recoverable errors as values.
//
// Every stage returns `Status` or `Result<T>` for problems a user can cause or fix (a bad file, a
// corrupt record, an impossible setting). The message is one line, written for the user: what was
// wrong, where (file, byte offset, record) and, when it helps, what to do. Programmer mistakes are
// asserts, never a Status.
#pragma once

#include <cassert>
#include <string>
#include <utility>
#include <variant>

namespace vramscope {

// The outcomes of a request, as a caller (the CLI, Python, a test) tells them apart. The CLI maps
// them onto exit statuses in one place (src/cli/exit_codes.cc): the three input outcomes -> 1,
// kUsage -> 2, kInternal -> 3, kInterrupted -> 130.
enum class StatusCode {
  kOk = 0,
  kInvalidInput,   // unreadable: the input (a file, a message, a setting's value) is malformed
  kUnsupported,    // readable, but not something vramscope reads or models
  kLimitExceeded,  // refused by a limit of the resource contract (docs/design/resource-contract.md)
  kUsage,          // the request itself is inconsistent (flags, options)
  kInterrupted,    // the caller's cancellation token was set
  kInternal,       // a bug in vramscope
};

class Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where it happened ("file.pickle: ").
  Status WithPrefix(const std::string& prefix) const { return Status(code_, prefix + message_); }

  // Whatever the input did wrong: unreadable, unsupported or over a limit.
  bool IsInputError() const {
    return code_ == StatusCode::kInvalidInput || code_ == StatusCode::kUnsupported ||
           code_ == StatusCode::kLimitExceeded;
  }

  friend Status InvalidInput(std::string message);
  friend Status Unsupported(std::string message);
  friend Status LimitExceeded(std::string message);
  friend Status UsageError(std::string message);
  friend Status Interrupted(std::string message);
  friend Status InternalError(std::string message);

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status InvalidInput(std::string message) {
  return Status(StatusCode::kInvalidInput, std::move(message));
}
inline Status Unsupported(std::string message) {
  return Status(StatusCode::kUnsupported, std::move(message));
}
inline Status LimitExceeded(std::string message) {
  return Status(StatusCode::kLimitExceeded, std::move(message));
}
inline Status UsageError(std::string message) {
  return Status(StatusCode::kUsage, std::move(message));
}
inline Status Interrupted(std::string message) {
  return Status(StatusCode::kInterrupted, std::move(message));
}
inline Status InternalError(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}

// A value or the Status that explains why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : data_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(data_).ok() && "a Result needs a value or an error");
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(data_);
  }
  T& value() & { return std::get<T>(data_); }
  const T& value() const& { return std::get<T>(data_); }
  T&& value() && { return std::get<T>(std::move(data_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace vramscope

// Early-return helpers: propagate a failed Status / Result to the caller.
#define VRAMSCOPE_CONCAT_INNER(a, b) a##b
#define VRAMSCOPE_CONCAT(a, b) VRAMSCOPE_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::vramscope::Status _vs_status = (expr); \
    if (!_vs_status.ok()) return _vs_status; \
  } while (false)

#define ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                          \
  if (!tmp.ok()) return tmp.status();         \
  lhs = std::move(tmp).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL(VRAMSCOPE_CONCAT(_vs_result_, __LINE__), lhs, expr)
