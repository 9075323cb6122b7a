/* The trace a person pulls: back-to-back device calls that touch in the
 * viewers' double arithmetic, /trace deflated when the client asks for gzip,
 * and the per-pool event counts (the demo's "ev_dropped") equal to
 * gpupool_trace_events_dropped_total. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exporters/trace_format.h"
#include "gpupool/agent.h"
#include "helpers/http_client.h"
#include "helpers/metrics_text.h"
#include "pool/event_ring.h"

/* ---- X events through the formatter ------------------------------------- */

static uint64_t rng_next(uint64_t *s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static char *format_records(const trace_record *rs, size_t n, uint64_t base_ns) {
  trace_pool pool = {.info = {.id = 1, .device = 0, .name = "p"}, .metrics_label = "p", .live = 1};
  trace_format_label_pools(&pool, 1);
  json_buf out;
  json_buf_init(&out);
  trace_format f;
  cr_assert_eq(trace_format_init(&f, &out, &pool, 1, base_ns), 0);
  for (size_t i = 0; i < n; i++)
    trace_format_record(&f, &rs[i]);
  trace_format_free(&f);
  cr_assert_not(out.failed);
  size_t len = json_buf_pending(&out);
  char *text = malloc(len + 3);
  cr_assert_not_null(text);
  text[0] = '[';
  json_buf_drain(&out, text + 1, len);
  text[len + 1] = ']';
  text[len + 2] = '\0';
  json_buf_free(&out);
  return text;
}

/* Pairs of an unmap and a map that started before the unmap ended (another
 * stream): the map is drawn from the unmap's end. Times up to ~10 minutes
 * after the base, so that µs values have up to 9 integer digits. */
Test(trace_always_on, back_to_back_device_calls_touch_exactly) {
  enum { PAIRS = 4000 };
  trace_record *rs = calloc(2 * PAIRS, sizeof *rs);
  cr_assert_not_null(rs);
  const uint64_t base = 1795473000000000000ull;
  uint64_t seed = 0x9e3779b97f4a7c15ull, t = base;
  for (size_t i = 0; i < PAIRS; i++) {
    t += 300000 + rng_next(&seed) % 150000000; /* apart from the previous pair */
    uint32_t d1 = 1 + (uint32_t)(rng_next(&seed) % 200000);
    uint32_t gap = 1 + (uint32_t)(rng_next(&seed) % 100000);
    for (int k = 0; k < 2; k++) {
      trace_record *r = &rs[2 * i + (size_t)k];
      r->kind = TRACE_SRC_POOL;
      r->tag = 0;
      r->ts_ns = k == 0 ? t : t + gap;
      r->u.ev.type = k == 0 ? EV_SEGMENT_FREE : EV_SEGMENT_ALLOC;
      r->u.ev.flags = EVF_PAGES | EVF_LARGE;
      r->u.ev.dur_ns = k == 0 ? d1 : gap + d1; /* started before the unmap ended */
      r->u.ev.addr = 0x7f0000000000ull + i * 0x200000u;
      r->u.ev.size = 2u << 20;
    }
    t += gap;
  }
  char *text = format_records(rs, 2 * PAIRS, base);
  cJSON *root = cJSON_Parse(text);
  cr_assert_not_null(root, "not JSON");
  /* cJSON reads numbers with strtod, as JavaScript does: doubles. Viewers
   * compute ts + dur, speedscope after subtracting the track's first ts. */
  double prev_end = -1, first = -1, prev_shifted_end = -1;
  const char *prev_name = NULL;
  int xs = 0, touching = 0;
  const cJSON *ev;
  cJSON_ArrayForEach(ev, root) {
    if (strcmp(cJSON_GetObjectItem(ev, "ph")->valuestring, "X") != 0)
      continue;
    double ts = cJSON_GetObjectItem(ev, "ts")->valuedouble;
    double dur = cJSON_GetObjectItem(ev, "dur")->valuedouble;
    const char *name = cJSON_GetObjectItem(ev, "name")->valuestring;
    if (first < 0)
      first = ts;
    double shifted = ts - first;
    if (prev_end >= 0) {
      cr_assert_geq(ts, prev_end, "%s at %.17g begins inside %s ending at %.17g", name, ts,
                    prev_name, prev_end);
      cr_assert_geq(shifted, prev_shifted_end, "%s begins inside %s after the shift", name,
                    prev_name);
      touching += ts == prev_end && shifted == prev_shifted_end;
    }
    /* The times are the recorded ones to half a grid step (1/1024 µs). */
    const trace_record *end = &rs[xs];
    uint64_t start_ns = xs % 2 ? rs[xs - 1].ts_ns : end->ts_ns - end->u.ev.dur_ns;
    cr_assert_lt(fabs(ts * 1000.0 - (double)(start_ns - base)), 0.5, "event %d: ts %.17g", xs, ts);
    cr_assert_lt(fabs((ts + dur) * 1000.0 - (double)(end->ts_ns - base)), 0.5,
                 "event %d: ts + dur %.17g", xs, ts + dur);
    cr_assert_eq(ts * 1024.0, floor(ts * 1024.0), "event %d: ts %.17g off the grid", xs, ts);
    cr_assert_eq(dur * 1024.0, floor(dur * 1024.0), "event %d: dur %.17g off the grid", xs, dur);
    prev_end = ts + dur;
    prev_shifted_end = shifted + dur;
    prev_name = name;
    xs++;
  }
  cr_assert_eq(xs, 2 * PAIRS);
  cr_assert_eq(touching, PAIRS, "every map begins where its unmap ends");
  cJSON_Delete(root);
  free(text);
  free(rs);
}

/* ---- over HTTP ----------------------------------------------------------- */

static gpupool *pool;

static void setup(void) {
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_CONF");
  unsetenv("LOCAL_RANK");
  gpupool_options o = {
      .name = "ao", .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64 << 20, .ignore_env = 1};
  cr_assert_eq(gpupool_create(&o, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
}

static void teardown(void) {
  gpupool_agent_stop();
  gpupool_destroy(pool);
}

static int start_agent(size_t trace_events) {
  gpupool_agent_options o = {.listen = "127.0.0.1:0",
                             .cupti = GPUPOOL_CUPTI_OFF,
                             .trace_events = trace_events,
                             .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
  int port = gpupool_agent_port();
  cr_assert_gt(port, 0);
  return port;
}

static void churn(int pairs) {
  for (int i = 0; i < pairs; i++) {
    void *p = NULL;
    cr_assert_eq(gpupool_malloc(pool, &p, 256 + (size_t)(i % 7) * 4096, NULL), GPUPOOL_OK, "%s",
                 gpupool_last_error());
    cr_assert_eq(gpupool_free(pool, p), GPUPOOL_OK);
  }
}

static int count_ph(const cJSON *root, const char *ph) {
  int n = 0;
  const cJSON *ev;
  cJSON_ArrayForEach(ev, cJSON_GetObjectItem(root, "traceEvents")) {
    n += strcmp(cJSON_GetObjectItem(ev, "ph")->valuestring, ph) == 0;
  }
  return n;
}

TestSuite(trace_always_on_http, .init = setup, .fini = teardown);

Test(trace_always_on_http, trace_is_gzipped_when_asked) {
  int port = start_agent(65536);
  churn(3000); /* a document of several 64 KiB blocks */
  http_response plain_r, zip_r;
  cr_assert_eq(http_request("127.0.0.1", port, "GET", "/trace", NULL, &plain_r), 0);
  cr_assert_eq(plain_r.status, 200);
  cr_assert_null(http_header(&plain_r, "Content-Encoding", (char[64]){0}, 64));
  cr_assert_gt(plain_r.body_len, 3 * 65536);
  cr_assert_eq(
      http_request("127.0.0.1", port, "GET", "/trace", "Accept-Encoding: gzip\r\n", &zip_r), 0);
  cr_assert_eq(zip_r.status, 200);
#ifdef GPUPOOL_HAVE_ZLIB
  char enc[64];
  cr_assert_str_eq(http_header(&zip_r, "Content-Encoding", enc, sizeof enc), "gzip");
  char *text;
  size_t len;
  cr_assert_eq(http_gunzip(zip_r.body, zip_r.body_len, &text, &len), 0, "not a gzip stream");
  cr_assert_lt(zip_r.body_len, len / 4, "%zu bytes deflated to %zu", len, zip_r.body_len);
  cJSON *a = cJSON_Parse(plain_r.body), *b = cJSON_Parse(text);
  cr_assert_not_null(a);
  cr_assert_not_null(b, "the gunzipped trace is not JSON");
  cr_assert_eq(count_ph(b, "b"), 3000);
  cr_assert_eq(count_ph(b, "b"), count_ph(a, "b"));
  cr_assert_eq(count_ph(b, "e"), count_ph(a, "e"));
  cJSON_Delete(a);
  cJSON_Delete(b);
  free(text);
#else
  cr_assert_null(http_header(&zip_r, "Content-Encoding", (char[64]){0}, 64));
#endif
  http_response_free(&plain_r);
  http_response_free(&zip_r);
}

Test(trace_always_on_http, event_counts_match_the_dropped_metric) {
  int port = start_agent(16); /* the smallest ring: most events are overwritten */
  churn(500);
  uint64_t recorded = 0, dropped = 0;
  cr_assert_eq(gpupool_trace_event_counts(pool, &recorded, &dropped), GPUPOOL_OK);
  cr_assert_geq(recorded, 1000, "an alloc and a free event per pair");
  cr_assert_gt(dropped, 0);
  cr_assert_lt(dropped, recorded);
  http_response r;
  cr_assert_eq(http_request("127.0.0.1", port, "GET", "/metrics", NULL, &r), 0);
  const char *const labels[] = {"pool=\"ao\"", NULL};
  double v;
  cr_assert_eq(metrics_value(r.body, "gpupool_trace_events_dropped_total", labels, &v), 0);
  cr_assert_eq((uint64_t)v, dropped, "metric %.0f, gpupool_trace_event_counts %llu", v,
               (unsigned long long)dropped);
  cr_assert_eq(metrics_value(r.body, "gpupool_trace_events_total", labels, &v), 0);
  cr_assert_eq((uint64_t)v, recorded);
  http_response_free(&r);

  cr_assert_eq(gpupool_trace_event_counts(NULL, &recorded, &dropped), GPUPOOL_ERR_INVALID);
  cr_assert_eq(gpupool_trace_event_counts(pool, NULL, &dropped), GPUPOOL_ERR_INVALID);
  cr_assert_eq(gpupool_trace_event_counts(pool, &recorded, NULL), GPUPOOL_ERR_INVALID);
}

/* ---- the series budget --------------------------------------------------- */

Test(trace_always_on_http, classic_size_buckets_by_config) {
  const char *const labels[] = {"pool=\"ao\"", NULL};
  for (int classic = 0; classic < 2; classic++) {
    setenv("GPUPOOL_AGENT_CONF", classic ? "size_buckets:classic" : "size_buckets:coarse", 1);
    gpupool_agent_options o = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF};
    cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_OK, "%s", gpupool_last_error());
    churn(100);
    http_response r;
    cr_assert_eq(http_request("127.0.0.1", gpupool_agent_port(), "GET", "/metrics", NULL, &r), 0);
    int n = metrics_count(r.body, "gpupool_allocation_size_bytes_bucket", labels);
    cr_assert_eq(n, classic ? 41 : 15, "%s: %d buckets", classic ? "classic" : "coarse", n);
    double inf, count;
    const char *const inf_labels[] = {"pool=\"ao\"", "le=\"+Inf\"", NULL};
    cr_assert_eq(metrics_value(r.body, "gpupool_allocation_size_bytes_bucket", inf_labels, &inf),
                 0);
    cr_assert_eq(metrics_value(r.body, "gpupool_allocation_size_bytes_count", labels, &count), 0);
    cr_assert_eq(inf, count);
    http_response_free(&r);
    gpupool_agent_stop();
  }
  setenv("GPUPOOL_AGENT_CONF", "size_buckets:fine", 1);
  gpupool_agent_options o = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF};
  cr_assert_eq(gpupool_agent_start(&o), GPUPOOL_ERR_INVALID);
  cr_assert(
      strstr(gpupool_last_error(), "size_buckets: unknown value 'fine' (valid: coarse, classic)"),
      "%s", gpupool_last_error());
  cr_assert_eq(gpupool_agent_port(), 0);
  unsetenv("GPUPOOL_AGENT_CONF");
}
