// Typed native errors. The code strings match runtime/errors.ts ErrorCode, so the binding
// can hand them to JavaScript unchanged and callers switch on codes, never on messages.
#pragma once

#include <stdexcept>
#include <string>

namespace tandem {

enum class ErrorCode { kConfigInvalid, kNotFound, kInvalidArgument, kResourceExhausted, kUnavailable, kInternal, kCancelled };

inline const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kConfigInvalid: return "config_invalid";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kInternal: return "internal";
    case ErrorCode::kCancelled: return "cancelled";
  }
  return "internal";
}

class NativeError : public std::runtime_error {
 public:
  NativeError(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }
  const char* code_name() const { return error_code_name(code_); }

 private:
  ErrorCode code_;
};

}  // namespace tandem
