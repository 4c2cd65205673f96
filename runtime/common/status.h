// Errors as values. Status carries a code and a message; Result<T> carries a value or a Status.
// Exceptions are used only at the edges (YAML parsing, CLI); everything on the hot path returns
// these.
//
// Same failure, same code. Bytes that arrive from a peer (or a file) and fail a check are
// kDataLoss wherever they are parsed: bad magic, too short, a length past the end, a checksum,
// inconsistent fields. A well-formed message in a format or protocol version this build does not
// speak is kFailedPrecondition (the peer runs another build; nothing was lost). A size above a
// configured maximum is kResourceExhausted. kInvalidArgument is only for what a local caller passed
// (options, addresses from the config, sizes of its own buffers), never for received bytes.
#pragma once

#include <cassert>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace grapevine {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // the caller passed something malformed
  kOutOfRange,       // a value outside its allowed range
  kNotFound,         // a file, key or peer that does not exist
  kAlreadyExists,
  kFailedPrecondition,
  kUnavailable,        // the peer or link is gone (connection failed, process died)
  kCancelled,          // the operation was abandoned by close() or shutdown
  kDeadlineExceeded,   // a wait ran past its deadline
  kDataLoss,           // a frame failed its checksum or invariants
  kResourceExhausted,  // a size above a configured maximum
  kUnimplemented,      // a backend or method that is not built or not viable here
  kInternal,
  kAborted,  // stopped on purpose, not a fault of the code or the input: training diverged
};

std::string_view errorCodeName(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }

  bool isOk() const { return code_ == ErrorCode::kOk; }
  explicit operator bool() const { return isOk(); }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "unavailable: peer 3 closed the connection"
  std::string toString() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

inline Status invalidArgument(std::string m) { return {ErrorCode::kInvalidArgument, std::move(m)}; }
inline Status outOfRange(std::string m) { return {ErrorCode::kOutOfRange, std::move(m)}; }
inline Status notFound(std::string m) { return {ErrorCode::kNotFound, std::move(m)}; }
inline Status failedPrecondition(std::string m) {
  return {ErrorCode::kFailedPrecondition, std::move(m)};
}
inline Status unavailable(std::string m) { return {ErrorCode::kUnavailable, std::move(m)}; }
inline Status cancelled(std::string m) { return {ErrorCode::kCancelled, std::move(m)}; }
inline Status deadlineExceeded(std::string m) {
  return {ErrorCode::kDeadlineExceeded, std::move(m)};
}
inline Status dataLoss(std::string m) { return {ErrorCode::kDataLoss, std::move(m)}; }
inline Status resourceExhausted(std::string m) {
  return {ErrorCode::kResourceExhausted, std::move(m)};
}
inline Status unimplemented(std::string m) { return {ErrorCode::kUnimplemented, std::move(m)}; }
inline Status internalError(std::string m) { return {ErrorCode::kInternal, std::move(m)}; }
inline Status aborted(std::string m) { return {ErrorCode::kAborted, std::move(m)}; }

// ok when got == want; otherwise kInvalidArgument "WHAT: GOT values, this peer has WANT" (a
// restored state, a buffer or an anchor made for another model's size).
Status checkValueCount(std::string_view what, std::size_t got, std::size_t want);

// A value or an error. Accessing value() of an error is a programming bug (asserted).
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).isOk() && "Result constructed from an ok Status");
  }

  bool isOk() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return isOk(); }

  T& value() & {
    assert(isOk());
    return std::get<T>(v_);
  }
  const T& value() const& {
    assert(isOk());
    return std::get<T>(v_);
  }
  T&& value() && {
    assert(isOk());
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  Status status() const { return isOk() ? Status::ok() : std::get<Status>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace grapevine

// Propagate an error Status from an expression returning Status.
#define GV_RETURN_IF_ERROR(expr)         \
  do {                                   \
    ::grapevine::Status _gv_st = (expr); \
    if (!_gv_st.isOk()) return _gv_st;   \
  } while (0)

#define GV_CONCAT_INNER(a, b) a##b
#define GV_CONCAT(a, b) GV_CONCAT_INNER(a, b)
// GV_ASSIGN_OR_RETURN(auto x, makeX()); returns the error Status if makeX() failed.
#define GV_ASSIGN_OR_RETURN(lhs, expr) \
  GV_ASSIGN_OR_RETURN_IMPL(GV_CONCAT(_gv_res_, __LINE__), lhs, expr)
#define GV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.isOk()) return tmp.status();          \
  lhs = std::move(tmp).value()
