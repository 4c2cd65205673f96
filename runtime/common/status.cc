#include "runtime/common/status.h"

namespace grapevine {

std::string_view errorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk:
      return "ok";
    case ErrorCode::kInvalidArgument:
      return "invalid argument";
    case ErrorCode::kOutOfRange:
      return "out of range";
    case ErrorCode::kNotFound:
      return "not found";
    case ErrorCode::kAlreadyExists:
      return "already exists";
    case ErrorCode::kFailedPrecondition:
      return "failed precondition";
    case ErrorCode::kUnavailable:
      return "unavailable";
    case ErrorCode::kCancelled:
      return "cancelled";
    case ErrorCode::kDeadlineExceeded:
      return "deadline exceeded";
    case ErrorCode::kDataLoss:
      return "data loss";
    case ErrorCode::kResourceExhausted:
      return "resource exhausted";
    case ErrorCode::kUnimplemented:
      return "unimplemented";
    case ErrorCode::kInternal:
      return "internal";
    case ErrorCode::kAborted:
      return "aborted";
  }
  return "unknown";
}

std::string Status::toString() const {
  if (isOk()) return "ok";
  std::string s(errorCodeName(code_));
  if (!message_.empty()) {
    s += ": ";
    s += message_;
  }
  return s;
}

Status checkValueCount(std::string_view what, std::size_t got, std::size_t want) {
  if (got == want) return Status::ok();
  return invalidArgument(std::string(what) + ": " + std::to_string(got) +
                         " values, this peer has " + std::to_string(want));
}

}  // namespace grapevine
