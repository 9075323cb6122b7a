#include "http.h"

#include <microhttpd.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_health.h"
#include "endpoint.h"
#include "exporters/metrics.h"
#include "http_accept.h"
#include "http_gzip_stream.h"
#include "http_index.h"
#include "ui.h"
#include "labels.h"
#include "oom_store.h"

static struct MHD_Daemon *g_daemon;
static atomic_int g_port;
static char g_address[300];
static char g_hostname[LABEL_VALUE_MAX];

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
  e->fn(e->arg, key, value);
  return MHD_YES;
}

static void arg_each(void *ctx, void (*fn)(void *arg, const char *key, const char *value),
                     void *arg) {
  each_ctx e = {fn, arg};
  MHD_get_connection_values(ctx, MHD_GET_ARGUMENT_KIND, each_value, &e);
}

/* ---- the small endpoints ---- */

static void text_body(endpoint_body *out, int status, const char *text) {
  out->status = status;
  out->content_type = "text/plain; charset=utf-8";
  out->data = strdup(text);
  out->len = out->data ? strlen(text) : 0;
}

static void refuse_any(void *arg, const char *key, const char *value) {
  (void)value;
  const char **first = arg;
  if (!*first)
    *first = key;
}

/* 400 when the request has query parameters; 0 when it has none. */
static int no_params(const endpoint_args *args, const char *path, endpoint_body *out) {
  const char *unknown = NULL;
  args->each(args->ctx, refuse_any, &unknown);
  if (!unknown)
    return 0;
  endpoint_bad_request(out, "%s takes no query parameters (got '%s')", path, unknown);
  return -1;
}

static void healthz_endpoint(const endpoint_args *args, endpoint_body *out) {
  if (no_params(args, "/healthz", out) == 0)
    text_body(out, 200, "ok\n");
}

static void root_endpoint(const endpoint_args *args, endpoint_body *out) {
  if (no_params(args, "/", out) == 0)
    index_endpoint(args, out, g_hostname);
}

typedef struct route {
  const char *path;
  void (*handler)(const endpoint_args *args, endpoint_body *out);
} route;

static const route routes[] = {
    {"/metrics", metrics_endpoint}, {"/trace", trace_endpoint}, {"/snapshot", snapshot_route},
    {"/healthz", healthz_endpoint}, {"/", root_endpoint},       {"/oom*", oom_endpoint},
    {"/ui*", ui_endpoint},
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
  return MHD_create_response_from_callback(len, STREAM_BLOCK, never_read, NULL, NULL);
}

static struct MHD_Response *make_response(endpoint_body *b, int head) {
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

static enum MHD_Result queue(struct MHD_Connection *c, endpoint_body *b, int head,
                             const char *allow) {
  struct MHD_Response *r = make_response(b, head);
  if (!r)
    return MHD_NO; /* out of memory: MHD closes the connection */
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
  (void)cls, (void)version, (void)upload_data;
  static int headers_seen;
  endpoint_body body = {0};
  if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    /* Answered at once, without reading a body: the connection closes. */
    char line[160];
    snprintf(line, sizeof line, "method %.64s not allowed: use GET or HEAD\n", method);
    text_body(&body, 405, line);
    return queue(c, &body, 0, "GET, HEAD");
  }
  /* A response queued in the first call (headers only) makes libmicrohttpd
   * close the connection after it: answer in the next call, once the request
   * is read (a body, which GET and HEAD should not have, is discarded). */
  if (!*con_cls) {
    *con_cls = &headers_seen;
    return MHD_YES;
  }
  if (*upload_data_size) {
    *upload_data_size = 0;
    return MHD_YES;
  }
  int head = strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  const route *rt = NULL;
  for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
    if (route_matches(&routes[i], url)) {
      rt = &routes[i];
      break;
    }
  if (!rt) {
    text_body(&body, 404, "not found: try /, /metrics, /trace, /snapshot, /oom, /ui or /healthz\n");
    return queue(c, &body, head, NULL);
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
  /* A streamed document (/trace: tens of MB) is deflated as it is sent. */
  if (body.read && !body.content_encoding && http_accepts_gzip(args.accept_encoding))
    http_gzip_wrap_stream(&body);
  return queue(c, &body, head, NULL);
}

int http_start(http_listener *l, const char *hostname, char *err, size_t errlen) {
  if (g_daemon) {
    close(l->fd);
    snprintf(err, errlen, "the HTTP server is already running");
    return -1;
  }
  snprintf(g_hostname, sizeof g_hostname, "%s", hostname);
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD;
  if (l->ipv6)
    flags |= MHD_USE_IPv6;
  g_daemon =
      MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET,
                       (MHD_socket)l->fd, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)HTTP_THREADS,
                       MHD_OPTION_CONNECTION_LIMIT, (unsigned)HTTP_CONNECTION_LIMIT,
                       MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)HTTP_PER_IP_LIMIT,
                       MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)HTTP_TIMEOUT_S, MHD_OPTION_END);
  if (!g_daemon) {
    close(l->fd);
    snprintf(err, errlen, "libmicrohttpd could not start a server on %s", l->address);
    return -1;
  }
  snprintf(g_address, sizeof g_address, "%s", l->address);
  atomic_store(&g_port, l->port);
  return 0;
}

void http_stop(void) {
  if (!g_daemon)
    return;
  atomic_store(&g_port, 0);
  MHD_stop_daemon(g_daemon); /* closes the listening socket too */
  g_daemon = NULL;
  g_address[0] = '\0';
}

int http_port(void) {
  return atomic_load(&g_port);
}

const char *http_address(void) {
  return g_address;
}
