/* PyTorch's memory snapshot of the live pools: gpupool_snapshot_write_torch()
 * and GET /snapshot?format=torch. Collection here (each pool copied
 * consistently, pool/pool_capture.h), rendering in exporters/torch_snapshot.c. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "endpoint.h"
#include "pool_label.h"
#include "exporters/torch_snapshot.h"
#include "gpupool/agent.h"
#include "core/array_grow.h"
#include "core/errors.h"
#include "pool/pool_capture.h"
#include "pool/registry.h"

typedef struct collection {
  const char *pool; /* a pool label (pool_label.h); NULL: every pool */
  int device;       /* -1: every device */
  pool_labeler labeler;
  pool_capture *caps;
  gpupool **held; /* the pools whose slow locks are held, caps[i]'s */
  size_t n, cap_caps, cap_held;
  int matched, failed;
} collection;

/* Under the registry lock: copies only. Each pool is copied under its slow
 * lock, held until every pool is copied (let_go_all): the pools of a device
 * share its addresses, and their segments must be of one moment for the
 * trace to replay (a segment one pool released after its copy could be
 * another's, copied later). */
static void collect_pool(gpupool *p, void *arg) {
  collection *c = arg;
  char label[POOL_LABEL_MAX];
  int labelled = pool_labeler_next(&c->labeler, p, label) == 0;
  if (labelled && !pool_label_selects(c->pool, c->device, label, gpupool_device(p)))
    return;
  c->matched++; /* unlabelled too: the answer is then "out of memory", not "no such pool" */
  if (!labelled)
    c->failed = 1;
  if (c->failed)
    return;
  /* Each array has its own capacity: where caps grew and held could not,
   * both still say what their array holds. */
  if (array_grow((void **)&c->caps, &c->cap_caps, c->n + 1, sizeof *c->caps, 8) != 0 ||
      array_grow((void **)&c->held, &c->cap_held, c->n + 1, sizeof *c->held, 8) != 0) {
    c->failed = 1;
    return;
  }
  pool_capture_hold(p);
  /* Every block and the events the rings still hold. */
  if (pool_capture_take(p, 1, SIZE_MAX, SIZE_MAX, 0, &c->caps[c->n]) == 0) {
    c->held[c->n++] = p;
  } else {
    pool_capture_let_go(p);
    c->failed = 1;
  }
}

static void let_go_all(void *arg) {
  collection *c = arg;
  for (size_t i = 0; i < c->n; i++)
    pool_capture_let_go(c->held[i]);
}

static void collection_free(collection *c) {
  pool_labeler_free(&c->labeler);
  for (size_t i = 0; i < c->n; i++)
    pool_capture_free(&c->caps[i]);
  free(c->caps);
  free(c->held);
}

/* The pickle of the pools of c->pool's label (NULL: all); NULL when out of
 * memory. */
static char *render(collection *c, size_t *len) {
  registry_foreach_then(collect_pool, let_go_all, c);
  if (c->failed)
    return NULL;
  const pool_capture **list = malloc((c->n + 1) * sizeof *list);
  if (!list)
    return NULL;
  for (size_t i = 0; i < c->n; i++)
    list[i] = &c->caps[i];
  char *data = torch_snapshot_pickle(list, c->n, len);
  free(list);
  return data;
}

gpupool_status gpupool_snapshot_write_torch(FILE *f, const char *pool) {
  if (!f)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_snapshot_write_torch: f is NULL");
  collection c = {.pool = pool, .device = -1};
  size_t len = 0;
  char *data = render(&c, &len);
  int matched = c.matched;
  collection_free(&c);
  if (pool && !matched) {
    free(data);
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_snapshot_write_torch: pool '%s': %s", pool,
                     POOL_LABEL_UNKNOWN);
  }
  if (!data)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "gpupool_snapshot_write_torch: out of host memory");
  int failed = fwrite(data, 1, len, f) != len || fflush(f) != 0;
  int err = errno; /* before free */
  free(data);
  if (failed)
    return pool_fail(GPUPOOL_ERR_BACKEND, "gpupool_snapshot_write_torch: write failed: %s",
                     strerror(err));
  return GPUPOOL_OK;
}

static void torch_endpoint(const endpoint_args *args, endpoint_body *out) {
  collection c = {0};
  if (snapshot_selection(args, &c.pool, &c.device, out) != 0)
    return;
  size_t len = 0;
  char *data = render(&c, &len);
  int matched = c.matched;
  collection_free(&c);
  if ((c.pool || c.device >= 0) && !matched) {
    free(data);
    endpoint_pool_unmatched(out, "", c.pool, c.device);
    return;
  }
  if (!data) {
    endpoint_out_of_memory(out, "building the snapshot");
    return;
  }
  out->status = 200;
  out->content_type = "application/octet-stream";
  snprintf(out->filename, sizeof out->filename, "gpupool-snapshot.pickle");
  out->data = data;
  out->len = len;
}

void snapshot_route(const endpoint_args *args, endpoint_body *out) {
  /* the other parameters are the handlers' (snapshot_selection) */
  static const char *const format_only[] = {"format", NULL};
  endpoint_params p;
  endpoint_count_params(args, format_only, &p);
  const char *format = args->get(args->ctx, "format");
  if (p.count[0] > 1) {
    endpoint_bad_request(out, "parameter 'format' given more than once");
    return;
  }
  if (!format || strcmp(format, "json") == 0) {
    snapshot_endpoint(args, out);
    return;
  }
  if (strcmp(format, "torch") == 0) {
    torch_endpoint(args, out);
    return;
  }
  char shown[80];
  endpoint_printable(shown, sizeof shown, format);
  endpoint_bad_request(out, "bad format '%s' (expected json or torch)", shown);
}
