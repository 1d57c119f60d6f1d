// Helpers of the network attempts: a connect with a deadline that reports the errno.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include "../attack.h"

// 0 = connected; otherwise the errno (ETIMEDOUT after `ms`).
static inline int try_connect(int family, int type, const char* addr, int port, int ms) {
  int s = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (s < 0) return errno;
  struct sockaddr_storage ss;
  socklen_t len;
  memset(&ss, 0, sizeof ss);
  if (family == AF_INET) {
    struct sockaddr_in* a = (struct sockaddr_in*)&ss;
    a->sin_family = AF_INET;
    a->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, addr, &a->sin_addr) != 1) {
      close(s);
      return EINVAL;
    }
    len = sizeof *a;
  } else {
    struct sockaddr_in6* a = (struct sockaddr_in6*)&ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons((uint16_t)port);
    if (inet_pton(AF_INET6, addr, &a->sin6_addr) != 1) {
      close(s);
      return EINVAL;
    }
    len = sizeof *a;
  }
  int rc = connect(s, (struct sockaddr*)&ss, len);
  int err = rc == 0 ? 0 : errno;
  if (err == EINPROGRESS) {
    struct pollfd p = {s, POLLOUT, 0};
    if (poll(&p, 1, ms) == 1) {
      socklen_t l = sizeof err;
      getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &l);
    } else {
      err = ETIMEDOUT;
    }
  }
  close(s);
  return err;
}

// Connecting must fail; "refused" lists acceptable errnos (0-terminated).
static inline void expect_no_connect(int family, const char* addr, int port) {
  int err = try_connect(family, SOCK_STREAM, addr, port, 1500);
  if (err == 0)
    escaped("connected to [%s]:%d", addr, port);
  else
    note("[%s]:%d %s", addr, port, errname(err));
}
