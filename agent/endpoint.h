/* The contract between the HTTP server (agent/http.c) and the documents it
 * serves. A handler reads its query parameters through `args` and fills
 * `out` with either a whole body (malloc'd, the server frees it) or a stream
 * that the server pulls in chunks. Handlers never block on pool locks for
 * more than a copy and make no CUDA call. */
#ifndef GPUPOOL_ENDPOINT_H
#define GPUPOOL_ENDPOINT_H

#include <stddef.h>
#include <sys/types.h>

typedef struct endpoint_args {
  /* Value of query parameter key, NULL when absent. */
  const char *(*get)(void *ctx, const char *key);
  /* Calls fn for each query parameter (to refuse unknown ones). */
  void (*each)(void *ctx, void (*fn)(void *arg, const char *key, const char *value), void *arg);
  void *ctx;
  const char *accept;          /* Accept header or NULL */
  const char *accept_encoding; /* Accept-Encoding header or NULL */
  const char *path;            /* the request's path ("/oom/3", "/ui/ui.js") */
  const char *if_none_match;   /* If-None-Match header or NULL */
} endpoint_args;

typedef struct endpoint_body {
  int status;                   /* 200, 400, ... */
  const char *content_type;     /* static string */
  const char *content_encoding; /* "gzip" or NULL */
  char filename[96];            /* non-empty: sent as an attachment of that name */
  const char *cache_control;    /* static; NULL: "no-store" */
  const char *const *headers;   /* static name, value, name, value, ..., NULL; or NULL */
  unsigned retry_after_s;       /* status 429: the Retry-After seconds (0: 1) */
  char *data;                   /* whole body (malloc'd), or NULL when streaming */
  size_t len;                   /* of data; status 304: no data, the length a 200 would send */
  /* Streaming: read returns bytes written into buf (<= max), 0 at the end,
   * -1 on error; close is always called once. */
  void *stream;
  ssize_t (*read)(void *stream, char *buf, size_t max);
  void (*close)(void *stream);
} endpoint_body;

/* The one way a handler answers with plain text or an error. */

/* Fill out->status 400 and a one-line text/plain reason. */
void endpoint_bad_request(endpoint_body *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* status and text (copied) as text/plain. */
void endpoint_text(endpoint_body *out, int status, const char *text);
/* A handler that ran out of host memory: 503, the same in every endpoint
 * (a scrape may well succeed again). what: "rendering /metrics", ... */
void endpoint_out_of_memory(endpoint_body *out, const char *what);
/* A request's value made safe to quote in a one-line reason: bytes outside
 * printable ASCII become '?'; a value longer than size - 1 is cut and ends
 * in "..." (size at least 4). */
void endpoint_printable(char *dst, size_t size, const char *v);
/* A request's query parameters counted against the names a handler takes,
 * for its checks and its own wording of their errors. */
#define ENDPOINT_MAX_PARAMS 8
/* The largest device ordinal a query parameter (device=) may name. */
#define ENDPOINT_DEVICE_MAX 4095

typedef struct endpoint_params {
  int count[ENDPOINT_MAX_PARAMS]; /* how often names[i] was given */
  const char *unknown;            /* the first other name; NULL: none */
  const char *repeated;           /* the first of names given more than once; NULL: none */
} endpoint_params;
/* Counts args' query parameters by names (NULL-terminated, at most
 * ENDPOINT_MAX_PARAMS) into out; none when args has no `each`. */
void endpoint_count_params(const endpoint_args *args, const char *const *names,
                           endpoint_params *out);
/* The name of the request's first query parameter, NULL when it has none. */
const char *endpoint_first_param(const endpoint_args *args);
/* 0 when the request has no query parameters; else -1 with a 400 naming
 * the first one (path: the route, for the reason). */
int endpoint_no_params(const endpoint_args *args, const char *path, endpoint_body *out);
/* A device= value v into *device; -1 with the reason in err ("bad device
 * 'V': expected a device ordinal 0..ENDPOINT_DEVICE_MAX") when it is no
 * ordinal, else 0. */
int endpoint_parse_device(const char *v, int *device, char *err, size_t errlen);
/* The request's device= parameter into *device: its ordinal, -1 when it is
 * not given; -1 with a 400 ("PATH: " and endpoint_parse_device's reason)
 * when it is no ordinal, else 0. */
int endpoint_device_param(const endpoint_args *args, const char *path, int *device,
                          endpoint_body *out);

/* A request's pool= (a pool label, pool_label.h) and device= into *pool
 * (NULL: every label) and *device (-1: every device); -1 with a 400 where
 * either is given twice, pool is empty or device no ordinal, else 0. prefix
 * begins each reason ("" or "/advice: "). */
int endpoint_pool_selection(const endpoint_args *args, const char *prefix, const char **pool,
                            int *device, endpoint_body *out);
/* The 400 of a selection (pool, device; at least one given) that no live
 * pool matched, its reason after prefix. */
void endpoint_pool_unmatched(endpoint_body *out, const char *prefix, const char *pool, int device);

/* agent/trace_endpoint.c: GET /trace?since=&until=&pool=&device=&limit= */
void trace_endpoint(const endpoint_args *args, endpoint_body *out);
/* agent/snapshot.c: GET /snapshot?pool=&device= */
void snapshot_endpoint(const endpoint_args *args, endpoint_body *out);
/* /snapshot's parameters, for either format: endpoint_pool_selection, and a
 * 400 for a name other than pool, device and format. */
int snapshot_selection(const endpoint_args *args, const char **pool, int *device,
                       endpoint_body *out);
/* agent/snapshot_torch.c: GET /snapshot?format=json|torch&pool=&device= (json: the
 * above; torch: PyTorch's memory snapshot pickle) */
void snapshot_route(const endpoint_args *args, endpoint_body *out);

#endif
