/* The agent's listening socket, opened by the agent itself (not by
 * libmicrohttpd) so that a bad address or a busy port comes back with the
 * system's own reason. */
#ifndef GPUPOOL_HTTP_LISTEN_H
#define GPUPOOL_HTTP_LISTEN_H

#include <stddef.h>

typedef struct http_listener {
  int fd;
  int port;          /* the bound port (the ephemeral one for port 0) */
  int ipv6;          /* bound to an IPv6 address */
  char address[300]; /* "127.0.0.1:9477", "[::1]:9477", "[::]:9477" */
} http_listener;

/* Binds host:port and listens. host "" = every interface: IPv6 and IPv4 on
 * one socket where the system has IPv6, else 0.0.0.0. A host name is
 * resolved. 0 or -1 with a reason. */
int http_listen_open(const char *host, int port, http_listener *out, char *err, size_t errlen);

#endif
