// Errors as values. Every fallible function returns Result<T>; an Error carries a code, the
// errno where there is one, and a chain of context ("starting sandbox sb_1: mounting rootfs:
// open_tree \"/x\": EPERM"). Only the top level (the API layer, the CLI) decides how to print
// it; error.cc is the one place that maps codes to HTTP statuses and CLI exit codes.
#pragma once

#include <cerrno>
#include <expected>
#include <string>
#include <string_view>
#include <utility>

namespace space {

enum class Code {
  kInvalidArgument,    // bad input from a client: 400
  kNotFound,           // unknown id or path: 404
  kAlreadyExists,      // 409
  kConflict,           // wrong state for the operation (e.g. exec on a destroyed sandbox): 409
  kPermissionDenied,   // 403
  kUnauthenticated,    // 401
  kPayloadTooLarge,    // 413
  kResourceExhausted,  // quota or limit reached: 429
  kTimeout,            // 504
  kUnavailable,        // the host cannot do this right now / missing facility: 503
  kUnimplemented,      // 501
  kProtocol,           // an untrusted peer (agent, snapshot file) sent something invalid: 502
  kInternal,           // a bug or an unexpected host failure: 500
};

std::string_view code_name(Code c);  // "invalid_argument", ...
int http_status(Code c);
// CLI exit code for an error of SPACE itself. Always 125 (DESIGN §1): the command's own
// codes are passed through separately.
inline constexpr int kExitSpaceFailed = 125;

class [[nodiscard]] Error {
 public:
  Error(Code code, std::string message, int err = 0)
      : code_(code), errno_(err), message_(std::move(message)) {}

  // Builds an error from errno for a failed syscall: sys("mount", "\"/x\"") gives
  // "mount \"/x\": Permission denied (EPERM)".
  static Error sys(std::string_view call, std::string_view args = {}, int err = errno);

  Code code() const { return code_; }
  int sys_errno() const { return errno_; }
  // Full message with its context chain, outermost first.
  const std::string& message() const { return message_; }

  // Adds outer context: e.wrap("starting sandbox sb_1") -> "starting sandbox sb_1: <old>".
  Error&& wrap(std::string_view context) && {
    message_ = std::string(context) + ": " + message_;
    return std::move(*this);
  }
  Error& wrap(std::string_view context) & {
    message_ = std::string(context) + ": " + message_;
    return *this;
  }

 private:
  Code code_;
  int errno_;
  std::string message_;
};

template <class T = void>
using Result = std::expected<T, Error>;

inline std::unexpected<Error> fail(Code code, std::string message, int err = 0) {
  return std::unexpected(Error(code, std::move(message), err));
}
inline std::unexpected<Error> fail(Error e) { return std::unexpected(std::move(e)); }
inline std::unexpected<Error> fail_sys(std::string_view call, std::string_view args = {},
                                       int err = errno) {
  return std::unexpected(Error::sys(call, args, err));
}

// Short errno name, "EPERM" for EPERM; "errno 123" for unknown values.
std::string_view errno_name(int err);

}  // namespace space

// TRY(expr): evaluates a Result; on error returns it from the enclosing function, otherwise
// yields the value. TRY_CTX adds context. TRY_VOID/TRY_VOID_CTX for Result<void>.
// Not inside a braced initializer (`json{{"k", TRY(f())}}`): GCC does not destroy the
// half-built list's temporaries when the statement expression returns from the middle of it,
// which leaks them (the egress_wire fuzz target found one). Take the value into a local first.
#define SPACE_CONCAT_INNER(a, b) a##b
#define SPACE_CONCAT(a, b) SPACE_CONCAT_INNER(a, b)
#define TRY(expr)                                                            \
  ({                                                                         \
    auto SPACE_CONCAT(_r, __LINE__) = (expr);                                \
    if (!SPACE_CONCAT(_r, __LINE__))                                         \
      return std::unexpected(std::move(SPACE_CONCAT(_r, __LINE__).error())); \
    std::move(*SPACE_CONCAT(_r, __LINE__));                                  \
  })
#define TRY_CTX(expr, ctx)                                                             \
  ({                                                                                   \
    auto SPACE_CONCAT(_r, __LINE__) = (expr);                                          \
    if (!SPACE_CONCAT(_r, __LINE__))                                                   \
      return std::unexpected(std::move(SPACE_CONCAT(_r, __LINE__).error()).wrap(ctx)); \
    std::move(*SPACE_CONCAT(_r, __LINE__));                                            \
  })
#define TRY_VOID(expr)                                                       \
  do {                                                                       \
    auto SPACE_CONCAT(_r, __LINE__) = (expr);                                \
    if (!SPACE_CONCAT(_r, __LINE__))                                         \
      return std::unexpected(std::move(SPACE_CONCAT(_r, __LINE__).error())); \
  } while (0)
#define TRY_VOID_CTX(expr, ctx)                                                        \
  do {                                                                                 \
    auto SPACE_CONCAT(_r, __LINE__) = (expr);                                          \
    if (!SPACE_CONCAT(_r, __LINE__))                                                   \
      return std::unexpected(std::move(SPACE_CONCAT(_r, __LINE__).error()).wrap(ctx)); \
  } while (0)
