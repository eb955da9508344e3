/* bind() for `ml.training.train --bind-loopback` (ml/training/loopback.py says why), loaded with LD_PRELOAD.
 *
 * A TCP socket asked for a wildcard address is bound to loopback instead: 0.0.0.0 becomes
 * 127.0.0.1; [::] becomes ::ffff:127.0.0.1 on a dual-stack socket (what gRPC makes of
 * TensorFlow's "0.0.0.0:<port>": IPv4 peers, as TF_CONFIG names them, still reach it on
 * 127.0.0.1) and ::1 on a v6-only one. Every other bind (a named address, UDP) is unchanged.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

static const unsigned char V4_MAPPED_LOOPBACK[16] = {0, 0, 0, 0, 0,    0,    0,   0,
                                                     0, 0, 0xff, 0xff, 127, 0, 0, 1};

static int is_stream(int fd) {
  int type = 0;
  socklen_t size = sizeof type;
  return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size) == 0 && type == SOCK_STREAM;
}

static int v6_only(int fd) {
  int value = 1;
  socklen_t size = sizeof value;
  return getsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &value, &size) != 0 || value;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len) {
  bind_fn real = (bind_fn)dlsym(RTLD_NEXT, "bind");
  if (addr == NULL || !is_stream(fd)) return real(fd, addr, len);
  if (addr->sa_family == AF_INET && len >= sizeof(struct sockaddr_in)) {
    struct sockaddr_in in4;
    memcpy(&in4, addr, sizeof in4);
    if (in4.sin_addr.s_addr == htonl(INADDR_ANY)) {
      in4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      return real(fd, (const struct sockaddr *)&in4, sizeof in4);
    }
  } else if (addr->sa_family == AF_INET6 && len >= sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 in6;
    memcpy(&in6, addr, sizeof in6);
    if (IN6_IS_ADDR_UNSPECIFIED(&in6.sin6_addr)) {
      if (v6_only(fd))
        in6.sin6_addr = in6addr_loopback;
      else
        memcpy(&in6.sin6_addr, V4_MAPPED_LOOPBACK, sizeof V4_MAPPED_LOOPBACK);
      return real(fd, (const struct sockaddr *)&in6, sizeof in6);
    }
  }
  return real(fd, addr, len);
}
