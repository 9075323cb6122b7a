#include "http_listen.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BACKLOG 512

/* One socket on one address; the fd or -1 with errno set. */
static int bind_one(const struct sockaddr *sa, socklen_t len) {
  int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0)
    return -1;
  int one = 1, zero = 0;
  /* Reuse lets a restarted agent bind while old connections linger in
   * TIME_WAIT; it does not let two listeners share a port. */
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (sa->sa_family == AF_INET6) {
    const struct sockaddr_in6 *a6 = (const struct sockaddr_in6 *)sa;
    /* [::] also takes IPv4 (dual stack); a specific address only its own. */
    int any = memcmp(&a6->sin6_addr, &in6addr_any, sizeof in6addr_any) == 0;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, any ? &zero : &one, sizeof one);
  }
  if (bind(fd, sa, len) != 0 || listen(fd, BACKLOG) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

static void describe(http_listener *l) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  char host[INET6_ADDRSTRLEN] = "?";
  if (getsockname(l->fd, (struct sockaddr *)&ss, &len) != 0)
    return;
  if (ss.ss_family == AF_INET6) {
    const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    l->port = ntohs(a->sin6_port);
    l->ipv6 = 1;
    snprintf(l->address, sizeof l->address, "[%s]:%d", host, l->port);
  } else {
    const struct sockaddr_in *a = (const struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    l->port = ntohs(a->sin_port);
    l->ipv6 = 0;
    snprintf(l->address, sizeof l->address, "%s:%d", host, l->port);
  }
}

static int open_any(int port, http_listener *out, char *err, size_t errlen) {
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
  a6.sin6_addr = in6addr_any;
  int fd = bind_one((const struct sockaddr *)&a6, sizeof a6);
  if (fd < 0 && (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL)) { /* no IPv6 here */
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a4.sin_addr.s_addr = htonl(INADDR_ANY);
    fd = bind_one((const struct sockaddr *)&a4, sizeof a4);
  }
  if (fd < 0) {
    snprintf(err, errlen, "cannot listen on port %d of every interface: %s", port, strerror(errno));
    return -1;
  }
  out->fd = fd;
  return 0;
}

int http_listen_open(const char *host, int port, http_listener *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  out->fd = -1;
  if (!*host) {
    if (open_any(port, out, err, errlen) != 0)
      return -1;
    describe(out);
    return 0;
  }
  char service[8];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints = {
      .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
  struct addrinfo *res = NULL;
  int rc = getaddrinfo(host, service, &hints, &res);
  if (rc != 0) {
    snprintf(err, errlen, "cannot listen on '%s': %s", host,
             rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
    return -1;
  }
  int e = 0;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = bind_one(ai->ai_addr, ai->ai_addrlen);
    if (fd >= 0) {
      out->fd = fd;
      break;
    }
    e = errno;
  }
  freeaddrinfo(res);
  if (out->fd < 0) {
    snprintf(err, errlen, "cannot listen on %s port %d: %s", host, port, strerror(e));
    return -1;
  }
  describe(out);
  return 0;
}
