#include "endpoint.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert.h"
#include "core/c_numeric.h"
#include "core/kvconf.h"
#include "pool_label.h"

void endpoint_bad_request(endpoint_body *out, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  locale_t old = c_numeric_enter();
  vsnprintf(line, sizeof line, fmt, ap);
  c_numeric_leave(old);
  va_end(ap);
  for (char *p = line; *p; p++) /* one line, whatever went into it */
    if (*p == '\n' || *p == '\r')
      *p = ' ';
  memset(out, 0, sizeof *out);
  out->status = 400;
  out->content_type = "text/plain; charset=utf-8";
  size_t n = strlen(line);
  out->data = malloc(n + 2);
  if (out->data) {
    memcpy(out->data, line, n);
    out->data[n] = '\n';
    out->data[n + 1] = '\0';
    out->len = n + 1;
  }
}

void endpoint_text(endpoint_body *out, int status, const char *text) {
  memset(out, 0, sizeof *out);
  out->status = status;
  out->content_type = "text/plain; charset=utf-8";
  out->data = strdup(text);
  out->len = out->data ? strlen(text) : 0;
}

void endpoint_out_of_memory(endpoint_body *out, const char *what) {
  char line[160];
  snprintf(line, sizeof line, "out of memory %s\n", what);
  endpoint_text(out, 503, line);
}

void endpoint_printable(char *dst, size_t size, const char *v) {
  gp_assert_internal(size >= 4);
  size_t len = strlen(v), keep = len < size ? len : size - 4, n;
  for (n = 0; n < keep; n++)
    dst[n] = (v[n] >= 0x20 && v[n] < 0x7f) ? v[n] : '?';
  if (keep < len) {
    memcpy(dst + n, "...", 3);
    n += 3;
  }
  dst[n] = '\0';
}

static void first_param(void *arg, const char *key, const char *value) {
  (void)value;
  const char **first = arg;
  if (!*first)
    *first = key;
}

typedef struct param_count {
  const char *const *names;
  endpoint_params *out;
} param_count;

static void count_param(void *arg, const char *key, const char *value) {
  (void)value;
  param_count *pc = arg;
  for (int i = 0; pc->names[i]; i++) {
    if (strcmp(key, pc->names[i]) == 0) {
      if (pc->out->count[i]++ && !pc->out->repeated)
        pc->out->repeated = pc->names[i];
      return;
    }
  }
  if (!pc->out->unknown)
    pc->out->unknown = key;
}

void endpoint_count_params(const endpoint_args *args, const char *const *names,
                           endpoint_params *out) {
  *out = (endpoint_params){0};
  param_count pc = {names, out};
  if (args->each)
    args->each(args->ctx, count_param, &pc);
}

const char *endpoint_first_param(const endpoint_args *args) {
  const char *first = NULL;
  if (args->each)
    args->each(args->ctx, first_param, &first);
  return first;
}

int endpoint_parse_device(const char *v, int *device, char *err, size_t errlen) {
  uint64_t u = 0;
  if (kvconf_u64(v, 0, ENDPOINT_DEVICE_MAX, &u) != 0) {
    char shown[64];
    endpoint_printable(shown, sizeof shown, v);
    snprintf(err, errlen, "bad device '%s': expected a device ordinal 0..%d", shown,
             ENDPOINT_DEVICE_MAX);
    return -1;
  }
  *device = (int)u;
  return 0;
}

/* endpoint_device_param with the reason after prefix and sep. */
static int device_param(const endpoint_args *args, const char *prefix, const char *sep, int *device,
                        endpoint_body *out) {
  const char *v = args->get(args->ctx, "device");
  *device = -1;
  char err[128];
  if (v && endpoint_parse_device(v, device, err, sizeof err) != 0) {
    endpoint_bad_request(out, "%s%s%s", prefix, sep, err);
    return -1;
  }
  return 0;
}

int endpoint_device_param(const endpoint_args *args, const char *path, int *device,
                          endpoint_body *out) {
  return device_param(args, path, ": ", device, out);
}

int endpoint_no_params(const endpoint_args *args, const char *path, endpoint_body *out) {
  const char *unknown = endpoint_first_param(args);
  if (!unknown)
    return 0;
  endpoint_bad_request(out, "%s takes no query parameters (got '%s')", path, unknown);
  return -1;
}

int endpoint_pool_selection(const endpoint_args *args, const char *prefix, const char **pool,
                            int *device, endpoint_body *out) {
  static const char *const names[] = {"pool", "device", NULL};
  endpoint_params p;
  endpoint_count_params(args, names, &p);
  if (p.repeated) {
    endpoint_bad_request(out, "%sparameter '%s' given more than once", prefix, p.repeated);
    return -1;
  }
  *pool = args->get(args->ctx, "pool");
  if (*pool && !**pool) {
    endpoint_bad_request(out, "%sbad pool '': expected a pool name", prefix);
    return -1;
  }
  return device_param(args, prefix, "", device, out);
}

void endpoint_pool_unmatched(endpoint_body *out, const char *prefix, const char *pool, int device) {
  char shown[80];
  if (!pool) {
    endpoint_bad_request(out, "%sbad device '%d': no live pool is on it", prefix, device);
    return;
  }
  endpoint_printable(shown, sizeof shown, pool);
  if (device >= 0)
    endpoint_bad_request(out, "%sbad pool '%s' on device %d: %s", prefix, shown, device,
                         POOL_LABEL_UNKNOWN);
  else
    endpoint_bad_request(out, "%sbad pool '%s': %s", prefix, shown, POOL_LABEL_UNKNOWN);
}
