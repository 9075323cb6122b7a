#include "trace_query.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/clock.h"
#include "core/kvconf.h"
#include "pool/registry.h"
#include "pool_label.h"
#include "trace_counters.h"

#define LIMIT_MAX 1000000000ull

void trace_query_init(trace_query *q) {
  memset(q, 0, sizeof *q);
  q->until_ns = UINT64_MAX;
  q->device = -1;
}

int trace_time_parse(const char *s, uint64_t now_ns, uint64_t *out_ns) {
  int negative = *s == '-';
  if (negative)
    s++;
  uint64_t whole = 0, frac = 0;
  int nwhole = 0, nfrac = 0;
  for (; *s >= '0' && *s <= '9'; s++, nwhole++) {
    if (whole > (UINT64_MAX - 9) / 10)
      return -1;
    whole = whole * 10 + (uint64_t)(*s - '0');
  }
  if (*s == '.') {
    for (s++; *s >= '0' && *s <= '9'; s++, nfrac++) {
      if (nfrac >= 9)
        return -1; /* finer than a nanosecond */
      frac = frac * 10 + (uint64_t)(*s - '0');
    }
    if (nfrac == 0)
      return -1;
  }
  if (*s != '\0' || nwhole == 0)
    return -1;
  /* Scale to ns: absolute values are µs (3 decimals are ns), relative are s. */
  int scale_digits = negative ? 9 : 3;
  if (nfrac > scale_digits)
    return -1;
  uint64_t unit = negative ? 1000000000ull : 1000ull;
  for (int i = nfrac; i < scale_digits; i++)
    frac *= 10;
  if (whole > (UINT64_MAX - frac) / unit)
    return -1;
  uint64_t ns = whole * unit + frac;
  /* The trace writes times as signed 64-bit ns (year 2262): later is out of
   * range, not a time to wrap around. */
  if (ns > INT64_MAX)
    return -1;
  *out_ns = negative ? (ns < now_ns ? now_ns - ns : 0) : ns;
  return 0;
}

/* The parameters /trace takes. */
static const char *const keys[] = {"since", "until", "pool", "device", "limit", NULL};

typedef struct label_search {
  const char *label;
  pool_labeler labeler;
  int found, failed;
} label_search;

static void match_label(gpupool *p, void *arg) {
  label_search *ls = arg;
  char label[POOL_LABEL_MAX];
  if (pool_labeler_next(&ls->labeler, p, label) != 0)
    ls->failed = 1;
  else if (strcmp(label, ls->label) == 0)
    ls->found = 1;
}

/* 1 if a live pool has this label, or a pool gone since that the trace
 * remembers had it; -1 when out of host memory. */
static int pool_label_known(const char *label) {
  label_search ls = {.label = label};
  registry_foreach(match_label, &ls);
  int found = ls.found || (!ls.failed && trace_counters_knows_label(label, &ls.labeler));
  pool_labeler_free(&ls.labeler);
  return found ? 1 : ls.failed ? -1 : 0;
}

int trace_query_parse_at(trace_query *q, const endpoint_args *args, uint64_t now_ns, char *err,
                         size_t errlen) {
  trace_query_init(q);
  char shown[80];
  endpoint_params sc;
  endpoint_count_params(args, keys, &sc);
  if (sc.unknown) {
    endpoint_printable(shown, sizeof shown, sc.unknown);
    snprintf(err, errlen, "unknown parameter '%s' (expected since, until, pool, device, limit)",
             shown);
    return -1;
  }
  if (sc.repeated) {
    snprintf(err, errlen, "parameter '%s' given more than once", sc.repeated);
    return -1;
  }

  const char *v;
  if ((v = args->get(args->ctx, "since")) && trace_time_parse(v, now_ns, &q->since_ns) != 0) {
    endpoint_printable(shown, sizeof shown, v);
    snprintf(err, errlen,
             "bad since '%s': expected microseconds since the epoch, up to "
             "9223372036854775.807 (2^63 - 1 ns, the year 2262; e.g. 1700000000000000.5), or "
             "negative seconds before now (e.g. -30)",
             shown);
    return -1;
  }
  if ((v = args->get(args->ctx, "until")) && trace_time_parse(v, now_ns, &q->until_ns) != 0) {
    endpoint_printable(shown, sizeof shown, v);
    snprintf(err, errlen,
             "bad until '%s': expected microseconds since the epoch, up to "
             "9223372036854775.807 (2^63 - 1 ns, the year 2262; e.g. 1700000000000000.5), or "
             "negative seconds before now (e.g. -5)",
             shown);
    return -1;
  }
  if (q->since_ns > q->until_ns) {
    snprintf(err, errlen, "since is later than until");
    return -1;
  }
  if ((v = args->get(args->ctx, "pool"))) {
    endpoint_printable(shown, sizeof shown, v);
    if (!*v || strlen(v) >= sizeof q->pool) {
      snprintf(err, errlen, "bad pool '%s': expected a pool name of 1 to %d bytes", shown,
               TRACE_POOL_NAME_MAX - 1);
      return -1;
    }
    int known = pool_label_known(v);
    if (known < 0) {
      snprintf(err, errlen, "out of host memory checking pool '%s'", shown);
      return -2;
    }
    if (!known) {
      snprintf(err, errlen,
               "bad pool '%s': no pool has this name or label, live or remembered (the label "
               "/metrics gives it: name#2, name#3, ... for pools that share a name on a device)",
               shown);
      return -1;
    }
    strcpy(q->pool, v);
  }
  uint64_t u;
  if ((v = args->get(args->ctx, "device")) &&
      endpoint_parse_device(v, &q->device, err, errlen) != 0)
    return -1;
  if ((v = args->get(args->ctx, "limit"))) {
    if (kvconf_u64(v, 1, LIMIT_MAX, &u) != 0) {
      endpoint_printable(shown, sizeof shown, v);
      snprintf(err, errlen, "bad limit '%s': expected a number of events 1..%llu", shown,
               LIMIT_MAX);
      return -1;
    }
    q->limit = u;
  }
  return 0;
}

int trace_query_parse(trace_query *q, const endpoint_args *args, char *err, size_t errlen) {
  return trace_query_parse_at(q, args, clock_realtime_ns(), err, errlen);
}
