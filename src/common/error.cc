// The one place that maps error codes to names, HTTP statuses and errno names.
#include "common/error.h"

#include <cstring>
#include <string>

namespace space {

std::string_view code_name(Code c) {
  switch (c) {
    case Code::kInvalidArgument:
      return "invalid_argument";
    case Code::kNotFound:
      return "not_found";
    case Code::kAlreadyExists:
      return "already_exists";
    case Code::kConflict:
      return "conflict";
    case Code::kPermissionDenied:
      return "permission_denied";
    case Code::kUnauthenticated:
      return "unauthenticated";
    case Code::kPayloadTooLarge:
      return "payload_too_large";
    case Code::kResourceExhausted:
      return "resource_exhausted";
    case Code::kTimeout:
      return "timeout";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kUnimplemented:
      return "unimplemented";
    case Code::kProtocol:
      return "protocol_error";
    case Code::kInternal:
      return "internal";
  }
  return "internal";
}

int http_status(Code c) {
  switch (c) {
    case Code::kInvalidArgument:
      return 400;
    case Code::kNotFound:
      return 404;
    case Code::kAlreadyExists:
      return 409;
    case Code::kConflict:
      return 409;
    case Code::kPermissionDenied:
      return 403;
    case Code::kUnauthenticated:
      return 401;
    case Code::kPayloadTooLarge:
      return 413;
    case Code::kResourceExhausted:
      return 429;
    case Code::kTimeout:
      return 504;
    case Code::kUnavailable:
      return 503;
    case Code::kUnimplemented:
      return 501;
    case Code::kProtocol:
      return 502;
    case Code::kInternal:
      return 500;
  }
  return 500;
}

std::string_view errno_name(int err) {
  // strerrorname_np is glibc >= 2.32 (Debian 12 has 2.36).
  const char* n = strerrorname_np(err);
  if (n != nullptr) return n;
  return "EUNKNOWN";
}

Error Error::sys(std::string_view call, std::string_view args, int err) {
  std::string m(call);
  if (!args.empty()) {
    m += ' ';
    m += args;
  }
  m += ": ";
  m += std::strerror(err);
  m += " (";
  m += errno_name(err);
  m += ')';
  Code code = Code::kInternal;
  switch (err) {
    case ENOENT:
      code = Code::kNotFound;
      break;
    case EEXIST:
      code = Code::kAlreadyExists;
      break;
    case EACCES:
    case EPERM:
      code = Code::kPermissionDenied;
      break;
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
    case ENOTDIR:
    case EISDIR:
    case EXDEV:
      code = Code::kInvalidArgument;
      break;
    case ENOSPC:
    case EDQUOT:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
      code = Code::kResourceExhausted;
      break;
    case ETIMEDOUT:
      code = Code::kTimeout;
      break;
    case ENOSYS:
    case EOPNOTSUPP:
      code = Code::kUnavailable;
      break;
    default:
      break;
  }
  return Error(code, std::move(m), err);
}

}  // namespace space
