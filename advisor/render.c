/* gpupool_advice_render: the advice as a table for people, JSON (the /advice
 * document, docs/advisor.md) or CSV. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/c_numeric.h"
#include "core/json_text.h"
#include "core/utf8.h"
#include "gpupool/advisor.h"

typedef struct sbuf {
  char *s;
  size_t n, cap;
  int failed;
} sbuf;

__attribute__((format(printf, 2, 3))) static void put(sbuf *b, const char *fmt, ...) {
  for (int tries = 0; tries < 2 && !b->failed; tries++) {
    va_list ap;
    va_start(ap, fmt);
    /* no pointer arithmetic on the first call's NULL buffer (undefined) */
    int n = vsnprintf(b->s ? b->s + b->n : NULL, b->cap - b->n, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = 1;
      return;
    }
    if ((size_t)n < b->cap - b->n) {
      b->n += (size_t)n;
      return;
    }
    size_t cap = (b->cap + (size_t)n + 1) * 2;
    char *s = realloc(b->s, cap);
    if (!s) {
      b->failed = 1;
      return;
    }
    b->s = s;
    b->cap = cap;
  }
}

static const char *conf_name(const char *c) {
  return *c ? c : "(defaults: bfc)";
}

/* Room for any size_text: 20 digits, a point, up to 63 decimals. */
#define SIZE_TEXT 96

/* bytes in units of 2^shift (20: MiB, 30: GiB) with prec decimals, as
 * printf's "%.*f" writes the exact quotient (rounded half to even), with one
 * exception: a value that is not a whole number of the unit is never
 * rounded to look like one, but gets more decimals until one of them is not
 * 0 (1023 MiB is "0.999" GiB, not "1.0"; 3 MiB is "0.003" GiB, not "0.00"),
 * so that no figure claims a size the advisor did not use. In integers
 * throughout: a double would round counts above 2^53. Returns out. */
static const char *size_text(char out[SIZE_TEXT], uint64_t bytes, unsigned shift, int prec) {
  const uint64_t mask = ((uint64_t)1 << shift) - 1, half = (mask + 1) / 2;
  const uint64_t rem = bytes & mask;
  char frac[64];
  /* the quotient's decimals end after shift digits: there one is not 0 */
  for (int p = prec; p < (int)sizeof frac; p++) {
    uint64_t whole = bytes >> shift, r = rem;
    for (int i = 0; i < p; i++) {
      r *= 10; /* below 10 x 2^shift */
      frac[i] = (char)('0' + (r >> shift));
      r &= mask;
    }
    int last = p ? frac[p - 1] - '0' : (int)(whole % 10);
    if (r > half || (r == half && r && last % 2)) { /* round up, carrying */
      int i = p - 1;
      for (; i >= 0 && frac[i] == '9'; i--)
        frac[i] = '0';
      if (i >= 0)
        frac[i]++;
      else
        whole++;
    }
    frac[p] = 0;
    int looks_whole = strspn(frac, "0") == (size_t)p;
    if (!looks_whole || !rem) {
      snprintf(out, SIZE_TEXT, "%llu%s%s", (unsigned long long)whole, p ? "." : "", frac);
      return out;
    }
  }
  snprintf(out, SIZE_TEXT, "%llu", (unsigned long long)bytes); /* not reached */
  return out;
}

/* A capacity (a whole number of MiB, as the advisor's are) as MiB and GiB:
 * "2432 MiB (2.38 GiB)", "1023 MiB (0.999 GiB)". */
static void mib_gib_text(char *out, size_t n, uint64_t c) {
  char m[SIZE_TEXT], g[SIZE_TEXT];
  snprintf(out, n, "%s MiB (%s GiB)", size_text(m, c, 20, 0), size_text(g, c, 30, 2));
}

static void capacity_text(char *out, size_t n, uint64_t c) {
  if (c == 0)
    snprintf(out, n, "not searched");
  else if (c == UINT64_MAX)
    snprintf(out, n, "does not fit the simulated device");
  else
    mib_gib_text(out, n, c);
}

/* Text of the caller's (a configuration, a history's path) into the table:
 * each byte that begins no UTF-8 character is U+FFFD, as in the JSON and the
 * CSV, and so is each control character (C0, DEL, C1), so that a line break
 * or an escape sequence in the text cannot break the table's lines or play
 * on the terminal. */
static void put_table_text(sbuf *b, const char *text) {
  const unsigned char *s = (const unsigned char *)text;
  size_t n = strlen(text);
  for (size_t i = 0; i < n;) {
    size_t len = utf8_char_len(s + i, n - i);
    int control =
        len == 1 ? s[i] < 0x20 || s[i] == 0x7f : len == 2 && s[i] == 0xc2 && s[i + 1] < 0xa0;
    if (!len || control)
      put(b, "\xEF\xBF\xBD");
    else
      put(b, "%.*s", (int)len, text + i);
    i += len ? len : 1;
  }
}

/* Whether there is a recommendation: c[recommended] is the current
 * configuration's entry when no candidate qualifies, replayed or not, with
 * its OOMs. Every renderer asks this, so that the table's marks, the summary,
 * the CSV's roles and the JSON agree. */
static int has_recommendation(const gpupool_advice *a) {
  const gpupool_advice_candidate *rec = &a->c[a->recommended];
  return rec->done && rec->r.ooms == 0;
}

/* Candidate i's role: 1 current, 2 recommended, 3 both (the current
 * configuration is the recommendation), 0 neither; named by these. */
static const char *const role_csv[] = {"", "current", "recommended", "current+recommended"};
static const char *const role_tag[] = {"", "CUR", "REC", "CUR+REC"};

static int role(const gpupool_advice *a, size_t i) {
  return (i == a->current) | (i == a->recommended && has_recommendation(a)) << 1;
}

static int by_peak(const void *x, const void *y, void *arg) {
  const gpupool_advice *a = arg;
  const gpupool_advice_candidate *p = &a->c[*(const size_t *)x], *q = &a->c[*(const size_t *)y];
  if (p->done != q->done)
    return q->done - p->done;
  if ((p->r.ooms != 0) != (q->r.ooms != 0))
    return (p->r.ooms != 0) - (q->r.ooms != 0);
  if (p->r.peak_reserved != q->r.peak_reserved)
    return p->r.peak_reserved < q->r.peak_reserved ? -1 : 1;
  return (p->device_ms > q->device_ms) - (p->device_ms < q->device_ms);
}

static void render_table(const gpupool_advice *a, sbuf *b) {
  const gpupool_history_info *in = &a->input;
  const gpupool_advice_candidate *cur = &a->c[a->current], *rec = &a->c[a->recommended];
  put(b, "history: ");
  put_table_text(b, in->source);
  put(b, " (");
  put_table_text(b, in->format);
  char num[SIZE_TEXT], num2[SIZE_TEXT], device[2 * SIZE_TEXT + 16];
  put(b, "): %llu events, %llu allocations, peak requested %s MiB", (unsigned long long)in->events,
      (unsigned long long)in->allocations, size_text(num, in->peak_requested, 20, 1));
  if (in->unmatched_frees || in->unmatched_record_streams || in->dropped)
    put(b,
        " (incomplete: %llu frees and %llu record_streams of older allocations, %llu events lost)",
        (unsigned long long)in->unmatched_frees, (unsigned long long)in->unmatched_record_streams,
        (unsigned long long)in->dropped);
  /* in GiB where one decimal is exact (80.0, 2.5), else in MiB (and GiB) */
  if (a->capacity % ((uint64_t)1 << 29) == 0)
    snprintf(device, sizeof device, "%s GiB", size_text(num, a->capacity, 30, 1));
  else
    mib_gib_text(device, sizeof device, a->capacity);
  put(b, "\nsimulated device: %s; %zu configurations replayed on %u threads in %.3f s%s\n\n",
      device, a->n, a->threads, a->wall_s,
      a->truncated ? " (deadline reached: some not replayed)" : "");
  size_t *order = malloc(a->n * sizeof *order);
  if (!order) {
    b->failed = 1;
    return;
  }
  for (size_t i = 0; i < a->n; i++)
    order[i] = i;
  qsort_r(order, a->n, sizeof *order, by_peak, (void *)a);
  put(b, "%-7s %12s %7s %9s %11s %11s %5s %6s  %s\n", "", "peak_res_MiB", "res/alc", "dev_calls",
      "device_ms", "added_ms", "OOMs", "frag", "configuration (GPUPOOL_CONF)");
  for (size_t k = 0; k < a->n; k++) {
    const gpupool_advice_candidate *c = &a->c[order[k]];
    const char *tag = role_tag[role(a, order[k])];
    if (!c->done) {
      put(b, "%-7s %12s %7s %9s %11s %11s %5s %6s  ", tag, "-", "-", "-", "-", "-", "-", "-");
      put_table_text(b, conf_name(c->conf));
      put(b, "\n");
      continue;
    }
    put(b, "%-7s %12s %7.3f %9llu %11.2f %+11.2f %5llu %6.3f  ", tag,
        size_text(num, c->r.peak_reserved, 20, 1), c->r.ratio,
        (unsigned long long)(c->r.device_allocs + c->r.device_frees), c->device_ms, c->added_ms,
        (unsigned long long)c->r.ooms, c->r.fragmentation_at_peak);
    put_table_text(b, conf_name(c->conf));
    put(b, "%s\n", c->added_ms > a->max_added_ms ? "  [over the time bound]" : "");
  }
  free(order);
  char cc[2 * SIZE_TEXT + 16], rc[2 * SIZE_TEXT + 16];
  capacity_text(cc, sizeof cc, a->min_capacity_current);
  capacity_text(rc, sizeof rc, a->min_capacity_recommended);
  put(b,
      "\nTime bound: %.1f ms of added device-call time over the current configuration "
      "(--max-added-ms).\n",
      a->max_added_ms);
  put(b, "Current:     ");
  put_table_text(b, conf_name(cur->conf));
  put(b, ": peak reserved %s MiB, device calls %.2f ms\n",
      size_text(num, cur->r.peak_reserved, 20, 1), cur->device_ms);
  if (!rec->done)
    put(b, "Recommended: none: the deadline came before any configuration was replayed\n");
  else if (rec->r.ooms)
    put(b, "Recommended: none: every configuration replayed ran out of memory on the simulated "
           "device\n");
  else {
    int more = rec->r.peak_reserved > cur->r.peak_reserved;
    put(b, "Recommended: peak reserved %s MiB (%s%s MiB less), %+.2f ms of device calls\n",
        size_text(num, rec->r.peak_reserved, 20, 1), more ? "-" : "",
        size_text(num2,
                  more ? rec->r.peak_reserved - cur->r.peak_reserved
                       : cur->r.peak_reserved - rec->r.peak_reserved,
                  20, 1),
        rec->added_ms);
    put(b, "  GPUPOOL_CONF=");
    put_table_text(b, *rec->conf ? rec->conf : "(unset: the defaults)");
    put(b, "\n");
    if (rec->has_torch) {
      put(b, "  PYTORCH_CUDA_ALLOC_CONF=");
      put_table_text(b, *rec->torch_conf ? rec->torch_conf : "(unset)");
      put(b, "\n");
    } else {
      put(b, "  (PyTorch's allocator has no equivalent of this configuration)\n");
    }
  }
  if (has_recommendation(a))
    put(b, "Smallest device without an OOM (granularity %s MiB): current %s, recommended %s\n",
        size_text(num, a->capacity_step, 20, 0), cc, rc);
  else
    put(b, "Smallest device without an OOM (granularity %s MiB): current %s\n",
        size_text(num, a->capacity_step, 20, 0), cc);
}

/* A CSV field of text by RFC 4180: quoted (configurations hold commas),
 * its quotes doubled, so a comma, a quote or a line break inside it is
 * text; each byte that begins no UTF-8 character is written as U+FFFD, as
 * the JSON output writes it (core/json_text.h). */
static void put_csv_text(sbuf *b, const char *text) {
  const unsigned char *s = (const unsigned char *)text;
  size_t n = strlen(text);
  put(b, "\"");
  for (size_t i = 0; i < n;) {
    size_t len = utf8_char_len(s + i, n - i);
    if (!len)
      put(b, "\xEF\xBF\xBD");
    else if (s[i] == '"')
      put(b, "\"\"");
    else
      put(b, "%.*s", (int)len, text + i);
    i += len ? len : 1;
  }
  put(b, "\"");
}

static void render_csv(const gpupool_advice *a, sbuf *b) {
  put(b, "role,gpupool_conf,pytorch_cuda_alloc_conf,replayed,peak_reserved_bytes,"
         "peak_allocated_bytes,ratio,device_allocs,device_frees,cache_flushes,alloc_retries,"
         "gc_runs,ooms,fragmentation_at_peak,pages_moved,device_syncs,device_ms,added_ms,"
         "replay_s,has_pytorch_equivalent\n");
  for (size_t i = 0; i < a->n; i++) {
    const gpupool_advice_candidate *c = &a->c[i];
    put(b, "%s,", role_csv[role(a, i)]);
    put_csv_text(b, c->conf);
    put(b, ",");
    put_csv_text(b, c->has_torch ? c->torch_conf : "");
    put(b, ",%d,%llu,%llu,%.4f,%llu,%llu,%llu,%llu,%llu,%llu,%.4f,%llu,%llu,%.3f,%.3f,%.6f,%d\n",
        c->done, (unsigned long long)c->r.peak_reserved, (unsigned long long)c->r.peak_allocated,
        c->r.ratio, (unsigned long long)c->r.device_allocs, (unsigned long long)c->r.device_frees,
        (unsigned long long)c->r.cache_flushes, (unsigned long long)c->r.alloc_retries,
        (unsigned long long)c->r.gc_runs, (unsigned long long)c->r.ooms, c->r.fragmentation_at_peak,
        (unsigned long long)c->r.pages_moved, (unsigned long long)c->r.device_syncs, c->device_ms,
        c->added_ms, c->r.seconds, c->has_torch);
  }
}

static void num(cJSON *o, const char *k, double v) {
  cJSON_AddNumberToObject(o, k, v);
}

/* A count of bytes, exact: as its decimal digits, where a JSON number made
 * from a double (cJSON's) rounds above 2^53 and may be written with an
 * exponent from 10^15 (9000000000000001 as 9e+15). The same digits as cJSON
 * writes for the counts it writes exactly. negative: minus bytes. */
static void bytes_json(cJSON *o, const char *k, uint64_t bytes, int negative) {
  char digits[32];
  snprintf(digits, sizeof digits, "%s%llu", negative && bytes ? "-" : "",
           (unsigned long long)bytes);
  cJSON_AddRawToObject(o, k, digits);
}

static void add_capacity(cJSON *o, const char *k, uint64_t c) {
  if (c == 0 || c == UINT64_MAX)
    cJSON_AddNullToObject(o, k);
  else
    bytes_json(o, k, c, 0);
}

static cJSON *candidate_json(const gpupool_advice_candidate *c) {
  cJSON *o = cJSON_CreateObject();
  json_add_text(o, "gpupool_conf", c->conf);
  if (c->has_torch)
    json_add_text(o, "pytorch_cuda_alloc_conf", c->torch_conf);
  else
    cJSON_AddNullToObject(o, "pytorch_cuda_alloc_conf");
  cJSON_AddBoolToObject(o, "replayed", c->done);
  bytes_json(o, "peak_reserved_bytes", c->r.peak_reserved, 0);
  bytes_json(o, "peak_allocated_bytes", c->r.peak_allocated, 0);
  num(o, "ratio", c->r.ratio);
  num(o, "device_allocs", (double)c->r.device_allocs);
  num(o, "device_frees", (double)c->r.device_frees);
  num(o, "cache_flushes", (double)c->r.cache_flushes);
  num(o, "alloc_retries", (double)c->r.alloc_retries);
  num(o, "gc_runs", (double)c->r.gc_runs);
  num(o, "ooms", (double)c->r.ooms);
  num(o, "fragmentation_at_peak", c->r.fragmentation_at_peak);
  num(o, "pages_moved", (double)c->r.pages_moved);
  num(o, "device_syncs", (double)c->r.device_syncs);
  num(o, "device_ms", c->device_ms);
  num(o, "added_ms", c->added_ms);
  num(o, "replay_s", c->r.seconds);
  return o;
}

static cJSON *advice_json(const gpupool_advice *a) {
  cJSON *root = cJSON_CreateObject();
  const gpupool_history_info *in = &a->input;
  cJSON *i = cJSON_AddObjectToObject(root, "input");
  json_add_text(i, "source", in->source); /* a path: any bytes */
  json_add_text(i, "format", in->format);
  num(i, "events", (double)in->events);
  num(i, "allocations", (double)in->allocations);
  num(i, "frees", (double)in->frees);
  num(i, "record_streams", (double)in->record_streams);
  num(i, "empty_caches", (double)in->empty_caches);
  num(i, "unmatched_frees", (double)in->unmatched_frees);
  num(i, "unmatched_record_streams", (double)in->unmatched_record_streams);
  num(i, "live_at_end", (double)in->live_at_end);
  num(i, "dropped_events", (double)in->dropped);
  num(i, "streams", (double)in->streams);
  bytes_json(i, "peak_requested_bytes", in->peak_requested, 0);
  num(i, "duration_s", in->duration_s);
  bytes_json(root, "capacity_bytes", a->capacity, 0);
  bytes_json(root, "capacity_step_bytes", a->capacity_step, 0);
  num(root, "max_added_ms", a->max_added_ms);
  num(root, "threads", a->threads);
  num(root, "wall_s", a->wall_s);
  cJSON_AddBoolToObject(root, "truncated", a->truncated);
  cJSON_AddBoolToObject(root, "has_recommendation", has_recommendation(a));
  cJSON *p = cJSON_AddObjectToObject(root, "prices_us");
  num(p, "malloc", a->prices.malloc_us);
  num(p, "free", a->prices.free_us);
  num(p, "page_map", a->prices.page_map_us);
  num(p, "page_unmap", a->prices.page_unmap_us);
  num(p, "page_move", a->prices.page_move_us);
  num(p, "synchronize", a->prices.sync_us);
  const gpupool_advice_candidate *cur = &a->c[a->current], *rec = &a->c[a->recommended];
  cJSON *c = candidate_json(cur);
  add_capacity(c, "min_capacity_bytes", a->min_capacity_current);
  cJSON_AddItemToObject(root, "current", c);
  cJSON *r = candidate_json(rec);
  add_capacity(r, "min_capacity_bytes", a->min_capacity_recommended);
  int more = rec->r.peak_reserved > cur->r.peak_reserved; /* saved a negative amount */
  bytes_json(r, "saved_bytes",
             more ? rec->r.peak_reserved - cur->r.peak_reserved
                  : cur->r.peak_reserved - rec->r.peak_reserved,
             more);
  cJSON_AddItemToObject(root, "recommended", r);
  cJSON *arr = cJSON_AddArrayToObject(root, "candidates");
  for (size_t k = 0; k < a->n; k++)
    cJSON_AddItemToArray(arr, candidate_json(&a->c[k]));
  return root;
}

char *gpupool_advice_render(const gpupool_advice *a, const char *format) {
  if (!a || !format)
    return NULL;
  if (!strcmp(format, "json")) {
    cJSON *j = advice_json(a);
    char *s = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!s)
      return NULL;
    char *out = malloc(strlen(s) + 2); /* a newline, and memory the caller frees with free() */
    if (out)
      sprintf(out, "%s\n", s);
    cJSON_free(s);
    return out;
  }
  if (strcmp(format, "table") && strcmp(format, "csv"))
    return NULL;
  sbuf b = {0};
  locale_t old = c_numeric_enter(); /* "7.96 GiB" whatever the program's locale */
  if (!strcmp(format, "table"))
    render_table(a, &b);
  else
    render_csv(a, &b);
  c_numeric_leave(old);
  if (b.failed || !b.s) {
    free(b.s);
    return NULL;
  }
  return b.s;
}
