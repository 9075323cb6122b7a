/* The agent's embedded HTTP server (libmicrohttpd, its own polling threads):
 * /metrics, /trace, /snapshot, /healthz and /. GET and HEAD only (405 with
 * Allow otherwise), 404 for unknown paths, 400 for bad query parameters.
 * Connection limits (in total and per client address) and an idle timeout
 * keep slow or many clients from starving the server. */
#ifndef GPUPOOL_HTTP_H
#define GPUPOOL_HTTP_H

#include <stddef.h>

#include "host_guard.h"
#include "http_listen.h"
#include "web_config.h"

#define HTTP_CONNECTION_LIMIT 128
#define HTTP_PER_IP_LIMIT     32
#define HTTP_TIMEOUT_S        10
#define HTTP_THREADS          2

/* Serves on a listener from http_listen_open, which it takes over (closed on
 * failure too). cfg (NULL = none, else installed in web_state.h, which the
 * server takes a reference of) gives TLS. guard (NULL = none; copied): the
 * Host headers answered, others get 403 (host_guard.h), kept across
 * http_restart.
 * Basic auth, headers and rate limits come from web_state.h per request.
 * 0 or -1 with a reason. */
int http_start(http_listener *l, web_config *cfg, const host_guard *guard, char *err,
               size_t errlen);
/* Moves the listening socket to a new server with cfg's TLS (certificates,
 * client CAs, versions changed), with no moment where the port is closed;
 * the old server's connections finish first (at most HTTP_TIMEOUT_S + 2 s,
 * the caller waits). -1 with a reason when it cannot: the previous
 * configuration then keeps serving. Not concurrent with http_start/stop. */
int http_restart(web_config *cfg, char *err, size_t errlen);
/* Closes every connection and joins the server's threads; idempotent. */
void http_stop(void);
/* The bound port, 0 when not serving. */
int http_port(void);
/* 1 when the server has a route for path (e.g. "/oom"), else 0. */
int http_has_route(const char *path);
/* "host:port" the server listens on ("" when not serving). */
const char *http_address(void);

#endif
