#include "http.h"

#include <math.h>
#include <microhttpd.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "advice.h"
#include "agent_health.h"
#include "endpoint.h"
#include "metrics.h"
#include "http_accept.h"
#include "http_gzip_stream.h"
#include "http_index.h"
#include "http_tls.h"
#include "labels.h"
#include "oom_store.h"
#include "core/clock.h"
#include "web_auth.h"
#include "ui.h"
#include "web_state.h"

static struct MHD_Daemon *g_daemon;
/* The current server's generation; each server's handler gets its own as
 * its closure, so a request can tell that its server is being replaced. */
static atomic_uint g_generation;
static web_config *g_daemon_cfg; /* what g_daemon was started with (a reference), or NULL */
static int g_ipv6;
static host_guard g_guard; /* with g_guarded: set by http_start, read by the server's threads */
static int g_guarded;
static atomic_int g_port;
static char g_address[300];

/* ---- endpoint_args over an MHD connection ---- */

/* A key given without '=' ("?limit") has no value in libmicrohttpd: it reads
 * as "" so that handlers refuse it rather than take it for an absent key. */
static const char *arg_get(void *ctx, const char *key) {
  const char *value = NULL;
  size_t len;
  if (MHD_lookup_connection_value_n(ctx, MHD_GET_ARGUMENT_KIND, key, strlen(key), &value, &len) !=
      MHD_YES)
    return NULL;
  return value ? value : "";
}

typedef struct each_ctx {
  void (*fn)(void *arg, const char *key, const char *value);
  void *arg;
} each_ctx;

static enum MHD_Result each_value(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
  (void)kind;
  each_ctx *e = cls;
  /* An empty piece of the query ("?&limit=3", "a=1&&b=2") names nothing:
   * skipped wherever it lies, as libmicrohttpd skips a trailing one and Go's
   * url.ParseQuery skips them all. "?=3" names the empty key: refused. */
  if (key[0] != '\0' || value)
    e->fn(e->arg, key, value);
  return MHD_YES;
}

static void arg_each(void *ctx, void (*fn)(void *arg, const char *key, const char *value),
                     void *arg) {
  each_ctx e = {fn, arg};
  MHD_get_connection_values(ctx, MHD_GET_ARGUMENT_KIND, each_value, &e);
}

/* ---- the small endpoints ---- */

static void healthz_endpoint(const endpoint_args *args, endpoint_body *out) {
  if (endpoint_no_params(args, "/healthz", out) == 0)
    endpoint_text(out, 200, "ok\n");
}

static void root_endpoint(const endpoint_args *args, endpoint_body *out) {
  if (endpoint_no_params(args, "/", out) != 0)
    return;
  char host[LABEL_VALUE_MAX];
  metrics_hostname(host, sizeof host); /* the hostname option, as every endpoint */
  index_endpoint(args, out, host);
}

typedef struct route {
  const char *path;
  void (*handler)(const endpoint_args *args, endpoint_body *out);
} route;

static const route routes[] = {
    {"/metrics", metrics_endpoint}, {"/trace", trace_endpoint},   {"/snapshot", snapshot_route},
    {"/healthz", healthz_endpoint}, {"/", root_endpoint},         {"/oom*", oom_endpoint},
    {"/ui*", ui_endpoint},          {"/advice", advice_endpoint},
};

/* A path ending in '*' also serves what lies under it ("/ui*": /ui, /ui/x). */
static int route_matches(const route *r, const char *url) {
  size_t n = strlen(r->path);
  int prefix = n > 1 && r->path[n - 1] == '*';
  n -= (size_t)prefix;
  return strncmp(url, r->path, n) == 0 && (url[n] == '\0' || (prefix && url[n] == '/'));
}

int http_has_route(const char *path) {
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (route_matches(&routes[i], path))
      return 1;
  return 0;
}

/* ---- responses ---- */

typedef struct stream_ctx {
  void *stream;
  ssize_t (*read)(void *stream, char *buf, size_t max);
  void (*close)(void *stream);
} stream_ctx;

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)pos;
  stream_ctx *s = cls;
  ssize_t n = s->read(s->stream, buf, max);
  if (n == 0)
    return MHD_CONTENT_READER_END_OF_STREAM;
  if (n < 0)
    return MHD_CONTENT_READER_END_WITH_ERROR;
  return n;
}

static void stream_free(void *cls) {
  stream_ctx *s = cls;
  if (s->close)
    s->close(s->stream);
  free(s);
}

#define STREAM_BLOCK (64 * 1024)

static ssize_t never_read(void *cls, uint64_t pos, char *buf, size_t max) {
  (void)cls, (void)pos, (void)buf, (void)max;
  return MHD_CONTENT_READER_END_WITH_ERROR;
}

/* A response that announces a body of len bytes and sends none: for a HEAD
 * and a 304, libmicrohttpd writes the size as Content-Length and never reads
 * the body, so the block it would read into can be tiny. */
static struct MHD_Response *length_only(uint64_t len) {
  return MHD_create_response_from_callback(len, 1, never_read, NULL, NULL);
}

/* HEAD of a streamed document: libmicrohttpd 0.9.75 ends a chunked HEAD
 * response with a "0" chunk, which would corrupt the next response on a
 * kept-alive connection, and a HEAD must not announce a length other than
 * GET's. So the document is produced and counted, and the answer announces
 * its length without a body. */
static struct MHD_Response *head_of_stream(endpoint_body *b) {
  char *scratch = malloc(STREAM_BLOCK);
  uint64_t len = 0;
  ssize_t n = -1;
  if (scratch)
    while ((n = b->read(b->stream, scratch, STREAM_BLOCK)) > 0)
      len += (uint64_t)n;
  free(scratch);
  if (b->close)
    b->close(b->stream);
  if (n < 0)
    return NULL;
  return length_only(len);
}

static struct MHD_Response *make_response(endpoint_body *b, int head) {
  /* A 304 may announce no length other than the 200's (RFC 9110 8.6); a
   * response of no bytes would announce "Content-Length: 0". */
  if (b->status == 304)
    return length_only(b->len);
  if (b->read && head)
    return head_of_stream(b);
  if (b->read) {
    stream_ctx *s = malloc(sizeof *s);
    if (!s) {
      if (b->close)
        b->close(b->stream);
      return NULL;
    }
    s->stream = b->stream;
    s->read = b->read;
    s->close = b->close;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK,
                                                               stream_read, s, stream_free);
    if (!r)
      stream_free(s);
    return r;
  }
  if (!b->data)
    return MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
  struct MHD_Response *r =
      MHD_create_response_from_buffer_with_free_callback(b->len, b->data, free);
  if (!r)
    free(b->data);
  return r;
}

/* Whether the web configuration sets header `name` (names are
 * case-insensitive). */
static int configured_header(const web_config *wc, const char *name) {
  for (size_t i = 0; wc && i < wc->nheaders; i++)
    if (!strcasecmp(wc->headers[i].name, name))
      return 1;
  return 0;
}

/* wc: the web configuration of the request (its headers go on every
 * response), or NULL. old: the request's server is being replaced by a
 * reload: its kept-alive connection closes after this answer, so that the
 * client reconnects to the new one. */
static enum MHD_Result queue(struct MHD_Connection *c, endpoint_body *b, int head,
                             const char *allow, const web_config *wc, int old) {
  struct MHD_Response *r = make_response(b, head);
  if (!r)
    return MHD_NO; /* out of memory: MHD closes the connection */
  for (size_t i = 0; wc && i < wc->nheaders; i++)
    MHD_add_response_header(r, wc->headers[i].name, wc->headers[i].value);
  if (b->status == 401)
    MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Basic realm=\"gpupool\"");
  if (b->status == 429) {
    char seconds[16];
    snprintf(seconds, sizeof seconds, "%u", b->retry_after_s ? b->retry_after_s : 1);
    MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, seconds);
  }
  if (old)
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
  if (b->content_type)
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, b->content_type);
  if (b->content_encoding)
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, b->content_encoding);
  if (b->filename[0]) {
    char disposition[sizeof b->filename + 40];
    snprintf(disposition, sizeof disposition, "attachment; filename=\"%s\"", b->filename);
    MHD_add_response_header(r, "Content-Disposition", disposition);
  }
  if (allow)
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
  for (const char *const *h = b->headers; h && h[0]; h += 2)
    if (!configured_header(wc, h[0])) /* the operator's value replaces the endpoint's */
      MHD_add_response_header(r, h[0], h[1]);
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL,
                          b->cache_control ? b->cache_control : "no-store");
  MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Accept, Accept-Encoding");
  enum MHD_Result ok = MHD_queue_response(c, (unsigned)b->status, r);
  MHD_destroy_response(r);
  if (b->status >= 400)
    agent_health_http_error(b->status);
  return ok;
}

/* An answer decided before the request was served (a refusal): queued
 * with the headers of the web configuration in force now. */
static enum MHD_Result queue_now(struct MHD_Connection *c, endpoint_body *b, int head, int old) {
  web_config *wc = web_state_acquire();
  enum MHD_Result ok = queue(c, b, head, NULL, wc, old);
  web_state_release(wc);
  return ok;
}

/* Whether an answer is deflated as it is sent where the client accepts
 * gzip: a streamed document (/trace: tens of MB), and a whole one that no
 * cache keeps (no-store: /snapshot, whose pickle runs to tens of MB,
 * /advice, /oom, /ui's JSON, the index) of more than GZIP_MIN_BODY bytes.
 * Not an error, a body encoded already (/metrics compresses its own), nor
 * one with a cache policy (/ui's page and assets: their ETag validates one
 * encoding). */
#define GZIP_MIN_BODY 1024
static int deflate_as_sent(const endpoint_body *b) {
  if (b->content_encoding || b->status != 200)
    return 0;
  return b->read || (b->data && !b->cache_control && b->len > GZIP_MIN_BODY);
}

static enum MHD_Result serve(struct MHD_Connection *c, const char *url, int head,
                             const web_config *wc, int old);
static int admit(struct MHD_Connection *c, const char *url, const web_config *wc,
                 endpoint_body *body);

typedef struct header_counts {
  unsigned host, content_length;
  const char *first_length;
  int lengths_differ;
} header_counts;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                    const char *value) {
  (void)kind;
  header_counts *n = cls;
  if (!strcasecmp(key, MHD_HTTP_HEADER_HOST))
    n->host++;
  if (!strcasecmp(key, MHD_HTTP_HEADER_CONTENT_LENGTH)) {
    if (n->content_length++ == 0)
      n->first_length = value;
    else if (strcmp(value ? value : "", n->first_length ? n->first_length : ""))
      n->lengths_differ = 1;
  }
  return MHD_YES;
}

/* Why a request is malformed as Go's server refuses it (RFC 9112 3.2,
 * 6.3), or NULL: an HTTP/1.1 request without a Host header or with two, or
 * Content-Length headers that disagree (a proxy and the agent could then
 * split the bytes into requests differently). libmicrohttpd's own strict
 * mode answers a missing Host twice, hence this. */
static const char *framing_error(struct MHD_Connection *c, const char *version) {
  header_counts n = {0};
  MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &n);
  if (n.host == 0 && !strcmp(version, MHD_HTTP_VERSION_1_1))
    return "bad request: an HTTP/1.1 request needs a Host header\n";
  if (n.host > 1)
    return "bad request: more than one Host header\n";
  if (n.lengths_differ)
    return "bad request: Content-Length headers that disagree\n";
  return NULL;
}

/* The path of a request target in absolute form ("http://host:port/path",
 * which RFC 9112 3.2.2 asks servers to accept): what follows the authority. */
static const char *origin_form(const char *url) {
  const char *rest = NULL;
  if (!strncasecmp(url, "http://", 7))
    rest = url + 7;
  else if (!strncasecmp(url, "https://", 8))
    rest = url + 8;
  if (!rest)
    return url;
  const char *path = strchr(rest, '/');
  return path ? path : "/";
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  (void)upload_data;
  static int headers_seen;
  endpoint_body body = {0};
  int old = (unsigned)(uintptr_t)cls != atomic_load(&g_generation);
  if (!*con_cls && g_guarded &&
      !host_guard_allows(&g_guard,
                         MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_HOST))) {
    /* answered at once, before any other check: the connection closes */
    endpoint_text(&body, 403,
                  "forbidden: this agent listens on loopback and answers only Host headers that "
                  "name it (localhost, an IP address, this machine's name, allowed_hosts), "
                  "against DNS rebinding; add the name to allowed_hosts (docs/security.md)\n");
    return queue_now(c, &body, !strcmp(method, MHD_HTTP_METHOD_HEAD), old);
  }
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    /* Answered at once, without reading a body: the connection closes.
     * Basic auth and the rate limit come first, as for any request. */
    web_config *wc = web_state_acquire();
    if (admit(c, url, wc, &body) == 0) {
      char line[160];
      snprintf(line, sizeof line, "method %.64s not allowed: use GET or HEAD\n", method);
      endpoint_text(&body, 405, line);
    }
    enum MHD_Result ok = queue(c, &body, 0, "GET, HEAD", wc, old);
    web_state_release(wc);
    return ok;
  }
  /* A response queued in the first call (headers only) makes libmicrohttpd
   * close the connection after it: answer in the next call, once the request
   * is read (a body, which GET and HEAD should not have, is discarded). A
   * request whose framing is ambiguous is answered at once, so the
   * connection closes before any of its bytes are read as another request. */
  if (!*con_cls) {
    const char *why = framing_error(c, version);
    if (why) {
      endpoint_text(&body, 400, why);
      return queue_now(c, &body, 0, old);
    }
    *con_cls = &headers_seen;
    return MHD_YES;
  }
  if (*upload_data_size) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  int head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  web_config *wc = web_state_acquire();
  enum MHD_Result ok = serve(c, origin_form(url), head, wc, old);
  web_state_release(wc);
  return ok;
}

/* basic_auth_users and rate_limit of the web configuration: 0 to go on, or
 * the error answer in body. */
static int admit(struct MHD_Connection *c, const char *url, const web_config *wc,
                 endpoint_body *body) {
  if (!wc)
    return 0;
  double now = (double)clock_monotonic_ns() / 1e9;
  double wait_s = 0;
  if (!web_rate_allow(wc, now, &wait_s)) {
    endpoint_text(body, 429, "too many requests (rate_limit)\n");
    /* whole seconds, rounded up: a client that waits so long gets a token */
    body->retry_after_s = wait_s < 1 ? 1 : wait_s > 86400 ? 86400 : (unsigned)ceil(wait_s);
    return -1;
  }
  if (!wc->nusers || (web_state_healthz_open() && strcmp(url, "/healthz") == 0))
    return 0;
  char *user, *pass;
  web_auth_parse_basic(
      MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION), &user, &pass);
  web_auth_result a = web_auth_check(wc, user, pass, now);
  web_auth_free_credentials(user, pass);
  if (a == WEB_AUTH_OK)
    return 0;
  if (a == WEB_AUTH_BUSY)
    endpoint_text(body, 429, "authentication is busy with other requests: try again\n");
  else
    endpoint_text(body, 401, "unauthorized: basic auth with a user of the agent's web_config\n");
  return -1;
}

static enum MHD_Result serve(struct MHD_Connection *c, const char *url, int head,
                             const web_config *wc, int old) {
  endpoint_body body = {0};
  if (admit(c, url, wc, &body) != 0)
    return queue(c, &body, head, NULL, wc, old);
  const route *rt = NULL;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (route_matches(&routes[i], url)) {
      rt = &routes[i];
      break;
    }
  if (!rt) {
    endpoint_text(
        &body, 404,
        "not found: try /, /metrics, /trace, /snapshot, /oom, /advice, /ui or /healthz\n");
    return queue(c, &body, head, NULL, wc, old);
  }
  endpoint_args args = {
      .get = arg_get,
      .each = arg_each,
      .ctx = c,
      .accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT),
      .accept_encoding =
          MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING),
      .path = url,
      .if_none_match =
          MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_IF_NONE_MATCH),
  };
  rt->handler(&args, &body);
  if (!body.status)
    body.status = 200;
  if (deflate_as_sent(&body) && http_accepts_gzip(args.accept_encoding))
    http_gzip_wrap_body(&body);
  return queue(c, &body, head, NULL, wc, old);
}

static int hex_value(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                : -1;
}

/* libmicrohttpd's unescaping of the path and the query (%HH), but %00 stays
 * as written: decoded, its NUL would end the C string the handlers read, so
 * "/metrics%00x" would serve /metrics and "limit=5%00x" read 5; kept, the
 * path is unknown and the value bad, as they are. */
static size_t unescape_but_nul(void *cls, struct MHD_Connection *c, char *s) {
  (void)cls;
  (void)c;
  char *w = s;
  for (const char *r = s; *r;) {
    int hi, lo;
    if (r[0] == '%' && (hi = hex_value(r[1])) >= 0 && (lo = hex_value(r[2])) >= 0 && (hi | lo)) {
      *w++ = (char)(hi << 4 | lo);
      r += 3;
    } else {
      *w++ = *r++;
    }
  }
  *w = '\0';
  return (size_t)(w - s);
}

/* A daemon on the listening socket fd, with cfg's TLS (cfg may be NULL), of
 * the current generation. */
static struct MHD_Daemon *start_daemon(int fd, const web_config *cfg) {
  void *generation = (void *)(uintptr_t)atomic_load(&g_generation);
  /* MHD_USE_ITC: a reload hands the socket over with MHD_quiesce_daemon.
   * TLS uses poll(): with libmicrohttpd 0.9.75's edge-triggered epoll, a
   * kept-alive TLS connection's next request could sit unread (seen under a
   * flood of requests on 4 connections). */
  unsigned flags =
      (cfg && cfg->tls ? MHD_USE_POLL_INTERNAL_THREAD : MHD_USE_AUTO_INTERNAL_THREAD) | MHD_USE_ITC;
  if (g_ipv6)
    flags |= MHD_USE_IPv6;
  struct MHD_OptionItem tls[HTTP_TLS_MAX_OPTIONS];
  http_tls_options(cfg, tls, &flags);
  return MHD_start_daemon(
      flags, 0, NULL, NULL, on_request, generation, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
      MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_THREADS, MHD_OPTION_CONNECTION_LIMIT,
      (unsigned)HTTP_CONNECTION_LIMIT, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
      (unsigned)HTTP_PER_IP_LIMIT, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S,
      MHD_OPTION_UNESCAPE_CALLBACK, unescape_but_nul, NULL, MHD_OPTION_ARRAY, tls, MHD_OPTION_END);
}

int http_start(http_listener *l, web_config *cfg, const host_guard *guard, char *err,
               size_t errlen) {
  if (g_daemon) {
    close(l->fd);
    snprintf(err, errlen, "the HTTP server is already running");
    return -1;
  }
  g_ipv6 = l->ipv6;
  g_guarded = guard != NULL;
  if (guard)
    g_guard = *guard;
  g_daemon = start_daemon(l->fd, cfg);
  if (!g_daemon) {
    close(l->fd);
    snprintf(err, errlen, "libmicrohttpd could not start a%s server on %s",
             cfg && cfg->tls ? "n HTTPS" : "", l->address);
    return -1;
  }
  g_daemon_cfg = cfg ? web_state_ref(cfg) : NULL;
  snprintf(g_address, sizeof g_address, "%s", l->address);
  atomic_store(&g_port, l->port);
  return 0;
}

/* Closes copy, a dup of fd that a daemon failed to start on, unless
 * libmicrohttpd closed it already (the number then names no file, or
 * another thread's). */
static void close_if_same_socket(int copy, int fd) {
  struct stat a, b;
  if (copy >= 0 && fstat(copy, &a) == 0 && fstat(fd, &b) == 0 && a.st_dev == b.st_dev &&
      a.st_ino == b.st_ino)
    close(copy);
}

int http_restart(web_config *cfg, char *err, size_t errlen) {
  if (!g_daemon) {
    snprintf(err, errlen, "the HTTP server is not running");
    return -1;
  }
  /* The old daemon stops accepting and hands the socket over; connections
   * that arrive meanwhile wait in the socket's backlog. */
  MHD_socket fd = MHD_quiesce_daemon(g_daemon);
  if (fd == MHD_INVALID_SOCKET) {
    snprintf(err, errlen, "libmicrohttpd could not hand its listening socket over");
    return -1;
  }
  struct MHD_Daemon *old = g_daemon;
  web_config *old_cfg = g_daemon_cfg;
  int rc = 0;
  atomic_fetch_add(&g_generation, 1);
  /* The new daemon gets a copy of the socket: libmicrohttpd closes the one
   * it was given when it fails to start, and the previous configuration
   * needs the socket still open (a second start on a closed one made
   * libmicrohttpd abort the host program). */
  int copy = dup((int)fd);
  g_daemon = copy >= 0 ? start_daemon(copy, cfg) : NULL;
  if (g_daemon) {
    close((int)fd);
    g_daemon_cfg = cfg ? web_state_ref(cfg) : NULL;
  } else {
    close_if_same_socket(copy, (int)fd);
    snprintf(err, errlen,
             "libmicrohttpd could not start a server with the new configuration; "
             "serving with the previous one");
    rc = -1;
    g_daemon = start_daemon((int)fd, old_cfg);
    if (!g_daemon) {
      snprintf(err, errlen,
               "libmicrohttpd could not start a server with the new configuration "
               "nor the previous one: the agent no longer serves HTTP");
      atomic_store(&g_port, 0); /* (the socket: libmicrohttpd closed it) */
      g_address[0] = '\0';
      g_daemon_cfg = NULL;
    } else if (old_cfg) {
      web_state_ref(old_cfg); /* one for the new daemon, one released below */
    }
  }
  /* Connections of the old daemon finish their requests (idle ones time
   * out after HTTP_TIMEOUT_S); then it stops. */
  for (int i = 0; i < (HTTP_TIMEOUT_S + 2) * 20; i++) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(old, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    if (!di || di->num_connections == 0)
      break;
    usleep(50 * 1000);
  }
  MHD_stop_daemon(old);
  web_state_release(old_cfg);
  return rc;
}

void http_stop(void) {
  if (!g_daemon)
    return;
  atomic_store(&g_port, 0);
  MHD_stop_daemon(g_daemon); /* closes the listening socket too */
  g_daemon = NULL;
  web_state_release(g_daemon_cfg);
  g_daemon_cfg = NULL;
  g_address[0] = '\0';
}

int http_port(void) {
  return atomic_load(&g_port);
}

const char *http_address(void) {
  return g_address;
}
