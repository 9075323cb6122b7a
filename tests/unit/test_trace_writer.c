/* The Chrome trace writer: format rules (parsed with cJSON), content against
 * what the pools did, overwrites, filters and refused parameters. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/cupti.h"
#include "exporters/json_stream.h"
#include "agent/trace_counters.h"
#include "exporters/trace_format.h"
#include "agent/trace_writer.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/pool_check.h"
#include "helpers/trace_check.h"
#include "core/clock.h"
#include "pool/event_clock.h"
#include "pool/pool_view.h"

#define MiB ((size_t)1 << 20)

static gpupool *host_pool(const char *name, int device, size_t capacity) {
  gpupool_options o = {.name = name,
                       .device = device,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = capacity,
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "create %s: %s", name, gpupool_last_error());
  return p;
}

static cJSON *read_checked(const char *const *pairs, size_t n) {
  return trace_parse_checked(trace_read_query(pairs, n, 4096));
}

static const cJSON *find_event(const cJSON *root, const char *ph, const char *name) {
  const cJSON *ev;
  cJSON_ArrayForEach(ev, trace_events(root)) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(ev, "ph");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(ev, "name");
    if (strcmp(p->valuestring, ph) == 0 && strstr(nm->valuestring, name))
      return ev;
  }
  return NULL;
}

static double arg_number(const cJSON *ev, const char *key) {
  const cJSON *v =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "args"), key);
  cr_assert(cJSON_IsNumber(v), "arg %s is not a number", key);
  return v->valuedouble;
}

static const char *arg_string(const cJSON *ev, const char *key) {
  const cJSON *v =
      cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(ev, "args"), key);
  cr_assert(cJSON_IsString(v), "arg %s is not a string", key);
  return v->valuestring;
}

static void init_events(size_t capacity) {
  pool_events_enable(capacity);
  trace_counters_reset();
}

/* Event times come from the TSC converted to the wall clock (core/clock.h),
 * close to clock_realtime_ns() but not to the nanosecond: phases of a test
 * are kept apart by GAP_NS and window bounds set in the middle of the gaps. */
#define GAP_NS 2000000ull
static uint64_t wait_past(uint64_t t) {
  uint64_t now;
  while ((now = clock_realtime_ns()) <= t)
    ;
  return now;
}

/* A counter sample of every pool, GAP_NS away from the events around it. */
static void sample_apart(void) {
  wait_past(clock_realtime_ns() + GAP_NS);
  trace_counters_sample();
  wait_past(clock_realtime_ns() + GAP_NS);
}

static void us_string(char *dst, size_t n, uint64_t ns) {
  snprintf(dst, n, "%llu.%03llu", (unsigned long long)(ns / 1000), (unsigned long long)(ns % 1000));
}

Test(trace_writer, follows_the_format_and_records_what_the_pool_did) {
  init_events(4096);
  gpupool *p = host_pool("train", 0, 64 * MiB);
  gpupool_host_stream *hs = gpupool_host_stream_create();
  sample_apart();
  void *small[10], *large[3];
  for (int i = 0; i < 10; i++)
    small[i] = pc_must_malloc(p, 1000 * (size_t)(i + 1), NULL);
  for (int i = 0; i < 3; i++)
    large[i] = pc_must_malloc(p, 3 * MiB, NULL);
  for (int i = 0; i < 10; i += 2)
    pc_must_free(p, small[i]);
  /* A deferred free: used on another stream with work pending. */
  cr_assert_eq(gpupool_record_stream(p, large[0], hs), GPUPOOL_OK);
  gpupool_host_stream_enqueue(hs);
  pc_must_free(p, large[0]);
  gpupool_host_stream_complete(hs);
  pc_must_free(p, pc_must_malloc(p, 512, NULL)); /* polls the pending free */
  pc_must_free(p, large[1]);
  pc_must_free(p, large[2]);
  cr_assert_gt(gpupool_empty_cache(p), 0);
  void *huge = NULL;
  cr_assert_eq(gpupool_malloc(p, &huge, 1024 * MiB, (void *)0x5eed), GPUPOOL_ERR_OOM);
  sample_apart();
  gpupool_stats st;
  cr_assert_eq(gpupool_get_stats(p, &st), GPUPOOL_OK);

  /* The same document whatever the size of the reads. */
  size_t len1, len2, len3;
  char *d1 = trace_read_all(NULL, 1, &len1);
  char *d2 = trace_read_all(NULL, 13, &len2);
  char *d3 = trace_read_all(NULL, 65536, &len3);
  cr_assert(d1 && d2 && d3);
  cr_assert_eq(len1, len2);
  cr_assert_eq(len1, len3);
  cr_assert_eq(memcmp(d1, d2, len1), 0);
  cr_assert_eq(memcmp(d1, d3, len1), 0);
  free(d2);
  free(d3);
  cJSON *root = trace_parse_checked(d1);

  int allocs = 10 + 3 + 1;
  cr_expect_eq(trace_count(root, "b", "pool train alloc"), allocs);
  cr_expect_eq(trace_count(root, "e", "pool train alloc"), (int)st.num_frees);
  cr_expect_eq(trace_count(root, "X", "segment alloc"), (int)st.num_device_alloc);
  cr_expect_eq(trace_count(root, "X", "segment free"), (int)st.num_device_free);
  cr_expect_eq(trace_count(root, "i", "empty_cache"), 1);
  cr_expect_eq(trace_count(root, "i", "free completed"), 1);
  cr_expect_eq(trace_count(root, "M", "process_name"), 1);

  /* Allocation bars: hex address and stream, sizes, where they came from. */
  int from_device = 0;
  const cJSON *ev;
  cJSON_ArrayForEach(ev, trace_events(root)) {
    if (strcmp(cJSON_GetObjectItem(ev, "ph")->valuestring, "b") != 0)
      continue;
    cr_expect_str_eq(cJSON_GetObjectItem(ev, "cat")->valuestring, "alloc");
    cr_expect_str_eq(cJSON_GetObjectItem(ev, "id")->valuestring, arg_string(ev, "address"));
    cr_expect_geq(arg_number(ev, "size"), arg_number(ev, "requested"));
    arg_string(ev, "stream");
    from_device += strcmp(arg_string(ev, "source"), "device") == 0;
  }
  cr_expect_eq(from_device, (int)st.num_device_sourced);

  const cJSON *oom = find_event(root, "i", "OOM pool train");
  cr_assert_not_null(oom);
  cr_expect_str_eq(cJSON_GetObjectItem(oom, "s")->valuestring, "g");
  cr_expect_eq(arg_number(oom, "requested"), (double)(1024 * MiB));
  cr_expect_str_eq(arg_string(oom, "stream"), "0x5eed", "the stream that asked");
  arg_number(oom, "free_in_pool");
  arg_number(oom, "largest_free_block");
  arg_number(oom, "device_free");
  cr_expect_eq(arg_number(oom, "reserved"), (double)st.reserved_bytes[0].current);

  /* Segment calls carry their duration and the counters move with them. */
  const cJSON *seg = find_event(root, "X", "segment alloc");
  cr_assert_not_null(seg);
  cr_expect_geq(cJSON_GetObjectItem(seg, "dur")->valuedouble, 0);
  cr_expect_gt(arg_number(seg, "size"), 0);
  int memory_samples = trace_count(root, "C", "pool train memory");
  cr_expect_eq(memory_samples, 2 + (int)(st.num_device_alloc + st.num_device_free),
               "two regular samples plus one per segment event");
  cr_expect_eq(trace_count(root, "C", "pool train allocations"), 2);

  /* The last memory sample is the second regular one: equal to the stats. */
  const cJSON *last = NULL;
  cJSON_ArrayForEach(ev, trace_events(root)) {
    if (strcmp(cJSON_GetObjectItem(ev, "ph")->valuestring, "C") == 0 &&
        strstr(cJSON_GetObjectItem(ev, "name")->valuestring, "memory"))
      last = ev;
  }
  cr_expect_eq(arg_number(last, "allocated"), (double)st.allocated_bytes[0].current);
  cr_expect_eq(arg_number(last, "reserved"), (double)st.reserved_bytes[0].current);
  cr_expect_eq(arg_number(last, "requested"), (double)st.requested_bytes[0].current);
  cr_expect_eq(arg_number(last, "free_in_pool"),
               (double)(st.reserved_bytes[0].current - st.allocated_bytes[0].current));

  cr_expect_eq(trace_other_number(root, "events_dropped"), 0);
  cr_expect_eq(trace_other_number(root, "events_skipped_while_streaming"), 0);
  cr_expect_eq(trace_other_number(root, "pid"), (double)getpid());
  const cJSON *other = cJSON_GetObjectItem(root, "otherData");
  cr_expect_str_eq(cJSON_GetObjectItem(other, "version")->valuestring, GPUPOOL_VERSION);
  cr_expect_gt(strlen(cJSON_GetObjectItem(other, "hostname")->valuestring), 0);
  cr_expect_str_eq(cJSON_GetObjectItem(other, "clock")->valuestring, "CLOCK_REALTIME");
  const char *source = cJSON_GetObjectItem(other, "clock_source")->valuestring;
  cr_expect(!strcmp(source, "tsc") || !strcmp(source, "clock_gettime"), "%s", source);
  cr_expect_eq(trace_other_number(root, "clock_tick_us"), 0, "no ticker: every stamp exact");
  cr_expect_eq(trace_other_number(root, "clock_resolution_us"), 0);
  cJSON_Delete(root);
  gpupool_host_stream_destroy(hs);
  gpupool_destroy(p);
}

Test(trace_writer, other_data_states_the_event_clock) {
  init_events(64);
  gpupool *p = host_pool("ticked", 0, 64 * MiB);
  pc_must_free(p, pc_must_malloc(p, 4096, NULL));
  cr_assert_eq(event_clock_start(250), 0);
  cJSON *root = trace_parse_checked(trace_read_all(NULL, 100, NULL));
  cr_expect_eq(trace_other_number(root, "clock_tick_us"), 250, "the ticker's tick");
  double res = trace_other_number(root, "clock_resolution_us");
  cr_expect(res == 0 || res == 250, "0 (exact now) or the tick (ticked now): %g", res);
  cJSON_Delete(root);
  event_clock_stop();
  root = trace_parse_checked(trace_read_all(NULL, 100, NULL));
  cr_expect_eq(trace_other_number(root, "clock_tick_us"), 0);
  cr_expect_eq(trace_other_number(root, "clock_resolution_us"), 0);
  cJSON_Delete(root);
  gpupool_destroy(p);
}

Test(trace_writer, overwritten_events_are_counted_and_the_trace_stays_valid) {
  init_events(16);
  gpupool *p = host_pool("tiny", 0, 64 * MiB);
  for (int i = 0; i < 500; i++)
    pc_must_free(p, pc_must_malloc(p, 4096 + (size_t)i, NULL));
  event_ring *rings[8];
  size_t n = pool_event_rings_at(p, rings, NULL, 8);
  uint64_t dropped = 0;
  for (size_t i = 0; i < n; i++) {
    dropped += event_ring_dropped(rings[i]);
    event_ring_unref(rings[i]);
  }
  cr_assert_gt(dropped, 0);
  /* The counter ring overwritten too: its samples are counted apart, so
   * events_dropped stays the pool rings' figure, the metric's (before, the
   * samples were added to it). */
  for (int i = 0; i < TRACE_COUNTERS_CAPACITY + 100; i++)
    trace_counters_sample();
  cJSON *root = trace_parse_checked(trace_read_all(NULL, 100, NULL));
  cr_expect_eq(trace_other_number(root, "events_dropped"), (double)dropped);
  cr_expect_geq(trace_other_number(root, "samples_dropped"), 100);
  cr_expect_eq(trace_other_number(root, "cupti_events_dropped"), 0);
  uint64_t recorded = 0, metric = 0;
  cr_assert_eq(gpupool_trace_event_counts(p, &recorded, &metric), GPUPOOL_OK);
  cr_expect_eq(metric, dropped, "gpupool_trace_events_dropped_total's figure");
  cr_expect_leq(trace_count(root, "b", NULL) + trace_count(root, "i", "free"), 16);
  cJSON_Delete(root);
  gpupool_destroy(p);
}

Test(trace_writer, requested_bytes_stay_within_allocated_when_a_free_was_overwritten) {
  init_events(16);
  gpupool *p = host_pool("lapped", 0, 64 * MiB);
  void *kept = pc_must_malloc(p, 4096, NULL);
  sample_apart(); /* requested: the 4096 bytes of `kept` */
  pc_must_free(p, kept);
  for (int i = 0; i < 40; i++) /* the ring laps kept's free */
    pc_must_free(p, pc_must_malloc(p, 4096, NULL));
  /* The 15 events kept: 6 whole pairs, then these three. */
  void *small = pc_must_malloc(p, 4096, NULL);
  void *big = pc_must_malloc(p, 32 * MiB, NULL); /* a new segment */
  cJSON *root = trace_parse_checked(trace_read_all(NULL, 100, NULL));
  const cJSON *seg = find_event(root, "X", "segment alloc");
  cr_assert_not_null(seg);
  cr_expect_eq(arg_number(seg, "allocated_after"), 4096);
  cr_expect_eq(trace_count(root, "C", "pool lapped memory"), 2,
               "the regular sample, the segment's");
  cJSON_Delete(root);
  pc_must_free(p, big);
  pc_must_free(p, small);
  gpupool_destroy(p);
}

Test(trace_writer, events_overwritten_while_streaming_are_skipped_and_counted) {
  init_events(4096);
  gpupool *p = host_pool("busy", 0, 64 * MiB);
  for (int i = 0; i < 3000; i++)
    pc_must_free(p, pc_must_malloc(p, 4096, NULL));
  trace_stream *s = trace_stream_open(NULL);
  cr_assert_not_null(s);
  size_t cap = 1 << 20, len = 0;
  char *doc = malloc(cap);
  ssize_t got = trace_stream_read(s, doc, 100);
  cr_assert_gt(got, 0);
  len += (size_t)got;
  /* The ring laps what the stream has not read yet. */
  for (int i = 0; i < 10000; i++)
    pc_must_free(p, pc_must_malloc(p, 4096, NULL));
  while ((got = trace_stream_read(s, doc + len, 1000)) > 0) {
    len += (size_t)got;
    if (cap - len < 1000)
      doc = realloc(doc, cap *= 2);
  }
  cr_assert_eq(got, 0);
  trace_stream_close(s);
  doc[len] = '\0';
  cJSON *root = trace_parse_checked(doc);
  cr_expect_gt(trace_other_number(root, "events_skipped_while_streaming"), 0);
  cJSON_Delete(root);
  gpupool_destroy(p);
}

Test(trace_writer, pool_filter_selects_one_pool) {
  init_events(1024);
  gpupool *a = host_pool("a", 0, 64 * MiB), *b = host_pool("b", 0, 64 * MiB);
  for (int i = 0; i < 3; i++)
    pc_must_malloc(a, 4096, NULL);
  for (int i = 0; i < 5; i++)
    pc_must_malloc(b, 4096, NULL);
  sample_apart();
  const char *q[] = {"pool=a"};
  cJSON *root = read_checked(q, 1);
  cr_expect_eq(trace_count(root, "b", NULL), 3);
  cr_expect_eq(trace_count(root, "C", "pool a memory"), 1,
               "the segment event came before any sample: no requested bytes to carry yet");
  cr_expect_eq(trace_count(root, "C", "pool b"), 0);
  cr_expect_eq(trace_count(root, "M", NULL), trace_count(root, "M", "_name") * 2,
               "names and sort indices");
  const cJSON *ev;
  cJSON_ArrayForEach(ev, trace_events(root)) {
    const char *name = cJSON_GetObjectItem(ev, "name")->valuestring;
    cr_expect_null(strstr(name, "pool b"), "%s", name);
  }
  cJSON_Delete(root);
  root = read_checked(NULL, 0);
  cr_expect_eq(trace_count(root, "b", NULL), 8);
  cJSON_Delete(root);
  gpupool_destroy(a);
  gpupool_destroy(b);
}

/* Pools that share a name get their /metrics labels as track names: "dup"
 * and "dup#2", what pool= selects them by. */
Test(trace_writer, pools_with_the_same_name_get_distinct_tracks) {
  init_events(1024);
  gpupool *a = host_pool("dup", 0, 64 * MiB), *b = host_pool("dup", 0, 64 * MiB);
  pc_must_malloc(a, 4096, NULL);
  pc_must_malloc(b, 4096, NULL);
  sample_apart();
  cJSON *root = read_checked(NULL, 0);
  cr_expect_eq(trace_count(root, "C", "pool dup memory"), 1);
  cr_expect_eq(trace_count(root, "C", "pool dup#2 memory"), 1);
  cr_expect_eq(trace_count(root, "C", "pool dup#2 allocations"), 1);
  cr_expect_eq(trace_count(root, "C", "#1 memory") + trace_count(root, "C", "(id"), 0,
               "no pool id in the names of live pools' tracks");
  cJSON_Delete(root);
  gpupool_destroy(a);
  gpupool_destroy(b);
}

/* The last sample of a track in root, or NULL. */
static const cJSON *last_counter(const cJSON *root, const char *name) {
  const cJSON *ev, *last = NULL;
  cJSON_ArrayForEach(ev, trace_events(root)) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(ev, "ph");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(ev, "name");
    if (!strcmp(p->valuestring, "C") && !strcmp(nm->valuestring, name))
      last = ev;
  }
  return last;
}

/* A destroyed pool's memory tracks end at zero at the first sampling round
 * after it went (its memory went with it), so that they do not show its
 * last bytes to the end of every later trace; its cumulative counts stay,
 * and a later round writes it no more samples. */
Test(trace_writer, a_destroyed_pools_memory_track_ends_at_zero) {
  init_events(1024);
  gpupool *a = host_pool("brief", 0, 64 * MiB);
  pc_must_malloc(a, MiB, NULL);
  sample_apart();
  const char *memory = "pool brief memory", *allocations = "pool brief allocations";
  gpupool_destroy(a);
  sample_apart();
  sample_apart();
  cJSON *root = read_checked(NULL, 0);
  const cJSON *last = last_counter(root, memory);
  cr_assert_not_null(last, "no samples of the destroyed pool");
  const cJSON *args = cJSON_GetObjectItemCaseSensitive(last, "args");
  cr_expect_eq(cJSON_GetObjectItemCaseSensitive(args, "allocated")->valuedouble, 0);
  cr_expect_eq(cJSON_GetObjectItemCaseSensitive(args, "reserved")->valuedouble, 0);
  cr_expect_eq(trace_count(root, "C", memory), 2, "its sample, then one closing sample");
  last = last_counter(root, allocations);
  cr_assert_not_null(last);
  args = cJSON_GetObjectItemCaseSensitive(last, "args");
  cr_expect_eq(cJSON_GetObjectItemCaseSensitive(args, "from_device")->valuedouble, 1,
               "the cumulative counts stay");
  cJSON_Delete(root);
}

/* pool= takes the labels /metrics gives pools that share a name ("dup",
 * "dup#2"); a destroyed pool is selected by its label at its last sample, a
 * live one by its label now, whatever label the table still has for it. */
Test(trace_writer, pool_filter_takes_the_metrics_label) {
  init_events(1024);
  gpupool *a = host_pool("dup", 0, 64 * MiB), *b = host_pool("dup", 0, 64 * MiB);
  pc_must_malloc(a, 4096, NULL);
  for (int i = 0; i < 2; i++)
    pc_must_malloc(b, 4096, NULL);
  sample_apart();
  const char *first[] = {"pool=dup"}, *second[] = {"pool=dup#2"};
  cJSON *root = read_checked(second, 1);
  cr_expect_eq(trace_count(root, "b", NULL), 2, "the second dup's allocations");
  cJSON_Delete(root);
  root = read_checked(first, 1);
  cr_expect_eq(trace_count(root, "b", NULL), 1, "the first dup's allocation");
  cJSON_Delete(root);

  char track[64];
  snprintf(track, sizeof track, "pool dup (gone, id %u) memory", pool_id(a));
  gpupool_destroy(a); /* b is "dup" now; the table still says "dup#2" */
  root = read_checked(first, 1);
  cr_expect_gt(trace_count(root, "C", track), 0, "the destroyed dup's samples");
  cr_expect_eq(trace_count(root, "b", NULL), 2, "the allocations of b, now dup");
  cr_expect_gt(trace_count(root, "C", "pool dup memory"), 0, "b's samples, under its label now");
  cJSON_Delete(root);
  cr_expect_null(trace_read_query(second, 1, 4096), "no pool is dup#2 any more");
  sample_apart();
  cr_expect_null(trace_read_query(second, 1, 4096), "nor after a sample");
  gpupool_destroy(b);
}

Test(trace_writer, device_filter_selects_one_device) {
  init_events(1024);
  gpupool *a = host_pool("zero", 0, 64 * MiB), *b = host_pool("one", 1, 64 * MiB);
  for (int i = 0; i < 2; i++)
    pc_must_malloc(a, 4096, NULL);
  for (int i = 0; i < 4; i++)
    pc_must_malloc(b, 4096, NULL);
  sample_apart();
  const char *q[] = {"device=1"};
  cJSON *root = read_checked(q, 1);
  cr_expect_eq(trace_count(root, "b", NULL), 4);
  const cJSON *ev;
  cJSON_ArrayForEach(ev, trace_events(root))
      cr_expect_eq(cJSON_GetObjectItem(ev, "pid")->valuedouble, 2, "device 1 is pid 2");
  cJSON_Delete(root);
  gpupool_destroy(a);
  gpupool_destroy(b);
}

Test(trace_writer, time_window_selects_exactly_the_events_inside) {
  init_events(4096);
  gpupool *p = host_pool("win", 0, 64 * MiB);
  void *keep = pc_must_malloc(p, 4096, NULL);     /* phase 1: its segment and one allocation */
  uint64_t t1 = clock_realtime_ns() + GAP_NS / 2; /* the window's start */
  wait_past(t1 + GAP_NS / 2);
  void *x[7];
  for (int i = 0; i < 7; i++) /* phase 2: 7 allocations and 7 frees */
    x[i] = pc_must_malloc(p, 8192, NULL);
  for (int i = 0; i < 7; i++)
    pc_must_free(p, x[i]);
  uint64_t t2 = clock_realtime_ns() + GAP_NS / 2; /* the window's end */
  wait_past(t2 + GAP_NS / 2);
  pc_must_free(p, keep); /* phase 3 */
  pc_must_malloc(p, 4096, NULL);

  char since[64], until[64];
  us_string(since + 6, sizeof since - 6, t1);
  memcpy(since, "since=", 6);
  us_string(until + 6, sizeof until - 6, t2);
  memcpy(until, "until=", 6);
  const char *both[] = {since, until};
  cJSON *root = read_checked(both, 2);
  cr_expect_eq(trace_count(root, "b", NULL), 7);
  cr_expect_eq(trace_count(root, "e", NULL), 7);
  cr_expect_eq(trace_count(root, "X", NULL), 0);
  cr_expect_eq(trace_other_number(root, "events_written"), 14);
  cJSON_Delete(root);

  const char *after[] = {since};
  root = read_checked(after, 1);
  cr_expect_eq(trace_count(root, "b", NULL), 8);
  cr_expect_eq(trace_count(root, "e", NULL), 7);
  cr_expect_eq(trace_count(root, "i", "free"), 1, "keep was allocated before the window");
  cJSON_Delete(root);

  const char *before[] = {until};
  root = read_checked(before, 1);
  cr_expect_eq(trace_count(root, "b", NULL), 8);
  cr_expect_eq(trace_count(root, "X", NULL), 1);
  cJSON_Delete(root);

  const char *relative[] = {"since=-3600", "until=-0"};
  root = read_checked(relative, 2);
  cr_expect_eq(trace_count(root, "b", NULL), 9);
  cJSON_Delete(root);
  gpupool_destroy(p);
}

Test(trace_writer, limit_keeps_the_newest_events) {
  init_events(4096);
  gpupool *p = host_pool("lim", 0, 64 * MiB);
  void *ptr[100];
  for (int i = 0; i < 100; i++)
    ptr[i] = pc_must_malloc(p, 4096, NULL);
  const char *q[] = {"limit=10"};
  cJSON *root = read_checked(q, 1);
  cr_expect_eq(trace_other_number(root, "events_written"), 10);
  cr_expect_eq(trace_count(root, "b", NULL), 10);
  const cJSON *other = cJSON_GetObjectItem(root, "otherData");
  cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(other, "limit_reached")));
  int k = 90;
  const cJSON *ev;
  cJSON_ArrayForEach(ev, trace_events(root)) {
    if (strcmp(cJSON_GetObjectItem(ev, "ph")->valuestring, "b") != 0)
      continue;
    char want[32];
    snprintf(want, sizeof want, "0x%llx", (unsigned long long)(uintptr_t)ptr[k++]);
    cr_expect_str_eq(cJSON_GetObjectItem(ev, "id")->valuestring, want);
  }
  cJSON_Delete(root);

  const char *all[] = {"limit=1000"};
  root = read_checked(all, 1);
  cr_expect_eq(trace_count(root, "b", NULL), 100);
  cr_expect_eq(trace_count(root, "X", NULL), 1);
  other = cJSON_GetObjectItem(root, "otherData");
  cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(other, "limit_reached")));
  cJSON_Delete(root);
  gpupool_destroy(p);
}

Test(trace_writer, bad_parameters_are_refused_with_a_reason) {
  gpupool *p = host_pool("known", 0, 64 * MiB);
  struct {
    const char *pair, *pair2, *reason;
  } cases[] = {
      {"bogus=1", NULL, "unknown parameter 'bogus'"},
      {"limit=5", "limit=6", "'limit' given more than once"},
      {"since=abc", NULL, "bad since"},
      {"since=1e5", NULL, "bad since"},
      {"since=", NULL, "bad since"},
      {"since=1.2345", NULL, "bad since"},
      {"since=+5", NULL, "bad since"},
      {"since= 5", NULL, "bad since"},
      {"until=99999999999999999999", NULL, "bad until"},
      {"until=-1.0000000001", NULL, "bad until"},
      {"since=9300000000000000", NULL, "bad since"},
      {"since=2000", "until=1000", "since is later than until"},
      {"pool=", NULL, "bad pool"},
      {"pool=nosuchpool", NULL, "no pool has this name"},
      {"device=-1", NULL, "bad device"},
      {"device=x", NULL, "bad device"},
      {"device=4096", NULL, "bad device"},
      {"limit=0", NULL, "bad limit"},
      {"limit=-5", NULL, "bad limit"},
      {"limit=10k", NULL, "bad limit"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    const char *pairs[] = {cases[i].pair, cases[i].pair2};
    test_args ta;
    endpoint_args a = test_args_make(&ta, pairs, cases[i].pair2 ? 2 : 1);
    trace_query q;
    char err[256] = "";
    cr_expect_eq(trace_query_parse(&q, &a, err, sizeof err), -1, "%s accepted", cases[i].pair);
    cr_expect(strstr(err, cases[i].reason), "%s: '%s' lacks '%s'", cases[i].pair, err,
              cases[i].reason);
    cr_expect_null(strchr(err, '\n'));
  }
  const char *good[] = {"since=1700000000000000.5", "until=-0.5", "pool=known", "device=0",
                        "limit=7"};
  test_args ta;
  endpoint_args a = test_args_make(&ta, good, 5);
  trace_query q;
  char err[256] = "";
  cr_assert_eq(trace_query_parse_at(&q, &a, 1800000000000000000ull, err, sizeof err), 0, "%s", err);
  cr_expect_eq(q.since_ns, 1700000000000000500ull);
  cr_expect_eq(q.until_ns, 1800000000000000000ull - 500000000ull);
  cr_expect_str_eq(q.pool, "known");
  cr_expect_eq(q.device, 0);
  cr_expect_eq(q.limit, 7);
  gpupool_destroy(p);
}

/* /trace names a bad device as /ui and /advice do (one parser); a value is
 * quoted printable, and one too long to quote whole ends in "...". */
Test(trace_writer, a_bad_device_is_named_as_the_other_endpoints_name_it) {
  char long_value[80];
  memset(long_value, '7', 70);
  strcpy(long_value + 70, "\x01");
  struct {
    const char *value, *reason;
  } cases[] = {
      {"2x", "bad device '2x': expected a device ordinal 0..4095"},
      {"1\x7f", "bad device '1?': expected a device ordinal 0..4095"},
      {long_value, "bad device '777777777777777777777777777777777777777777777777777777777777...': "
                   "expected a device ordinal 0..4095"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char pair[128];
    snprintf(pair, sizeof pair, "device=%s", cases[i].value);
    const char *pairs[] = {pair};
    test_args ta;
    endpoint_args a = test_args_make(&ta, pairs, 1);
    trace_query q;
    char err[256] = "";
    cr_expect_eq(trace_query_parse(&q, &a, err, sizeof err), -1);
    cr_expect_str_eq(err, cases[i].reason);
    int device = 5;
    char direct[256] = "";
    cr_expect_eq(endpoint_parse_device(cases[i].value, &device, direct, sizeof direct), -1);
    cr_expect_str_eq(direct, cases[i].reason);
    cr_expect_eq(device, 5, "a refused value leaves the device as it was");
  }
  char shown[8];
  endpoint_printable(shown, sizeof shown, "1234567");
  cr_expect_str_eq(shown, "1234567", "a value that fits is whole");
  endpoint_printable(shown, sizeof shown, "12345678");
  cr_expect_str_eq(shown, "1234...", "a value one byte too long is cut and says so");
  endpoint_printable(shown, sizeof shown, "a\tb");
  cr_expect_str_eq(shown, "a?b");
}

Test(trace_writer, time_values_parse_exactly) {
  uint64_t now = 100000000000ull, ns = 0; /* 100 s after the epoch */
  cr_expect_eq(trace_time_parse("12", now, &ns), 0);
  cr_expect_eq(ns, 12000);
  cr_expect_eq(trace_time_parse("12.345", now, &ns), 0);
  cr_expect_eq(ns, 12345);
  cr_expect_eq(trace_time_parse("12.3", now, &ns), 0);
  cr_expect_eq(ns, 12300);
  cr_expect_eq(trace_time_parse("-30", now, &ns), 0);
  cr_expect_eq(ns, 70000000000ull);
  cr_expect_eq(trace_time_parse("-1.5", now, &ns), 0);
  cr_expect_eq(ns, 98500000000ull);
  cr_expect_eq(trace_time_parse("-0.000000001", now, &ns), 0);
  cr_expect_eq(ns, now - 1);
  cr_expect_eq(trace_time_parse("-1000", now, &ns), 0);
  cr_expect_eq(ns, 0, "clamped at the epoch");
  cr_expect_eq(trace_time_parse("9223372036854775.807", now, &ns), 0);
  cr_expect_eq(ns, (uint64_t)INT64_MAX);
  const char *bad[] = {"",
                       "-",
                       "1.",
                       ".5",
                       "1e3",
                       "+5",
                       "0x10",
                       "1.2345",
                       " 5",
                       "5 ",
                       "--1",
                       "1.-5",
                       "-1.0000000001",
                       "99999999999999999999",
                       "9223372036854775.808", /* 2^63 ns: the trace's times are signed */
                       "18446744073709551.615"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_expect_eq(trace_time_parse(bad[i], now, &ns), -1, "'%s' accepted", bad[i]);
}

Test(trace_writer, endpoint_streams_json_or_refuses) {
  init_events(1024);
  gpupool *p = host_pool("ep", 0, 64 * MiB);
  pc_must_malloc(p, 4096, NULL);
  const char *bad[] = {"limit=0"};
  test_args ta;
  endpoint_args a = test_args_make(&ta, bad, 1);
  endpoint_body out = {0};
  trace_endpoint(&a, &out);
  cr_expect_eq(out.status, 400);
  cr_assert_not_null(out.data);
  cr_expect(strstr(out.data, "bad limit"), "%s", out.data);
  free(out.data);

  const char *good[] = {"pool=ep"};
  a = test_args_make(&ta, good, 1);
  memset(&out, 0, sizeof out);
  trace_endpoint(&a, &out);
  cr_assert_eq(out.status, 200);
  cr_expect_str_eq(out.content_type, "application/json");
  cr_assert(out.stream && out.read && out.close && !out.data);
  char *doc = calloc(1, 1 << 20);
  size_t len = 0;
  ssize_t got;
  while ((got = out.read(out.stream, doc + len, 512)) > 0)
    len += (size_t)got;
  cr_expect_eq(got, 0);
  out.close(out.stream);
  cJSON *root = trace_parse_checked(doc);
  cr_expect_eq(trace_count(root, "b", NULL), 1);
  cJSON_Delete(root);
  gpupool_destroy(p);
}

static char *slurp(FILE *f) {
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  char *doc = malloc((size_t)n + 1);
  cr_assert_eq(fread(doc, 1, (size_t)n, f), (size_t)n);
  doc[n] = '\0';
  return doc;
}

Test(trace_writer, written_to_a_file) {
  init_events(1024);
  gpupool *p = host_pool("file", 0, 64 * MiB);
  pc_must_malloc(p, 4096, NULL);
  FILE *f = tmpfile();
  cr_assert_eq(gpupool_trace_write(f), GPUPOOL_OK);
  cJSON *root = trace_parse_checked(slurp(f));
  fclose(f);
  cr_expect_eq(trace_count(root, "b", NULL), 1);
  cJSON_Delete(root);
  cr_expect_eq(gpupool_trace_write(NULL), GPUPOOL_ERR_INVALID);

  char dir[] = "/tmp/gpupool-trace-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  char path[128];
  snprintf(path, sizeof path, "%s/trace.json", dir);
  cr_assert_eq(trace_write_file(path), 0);
  f = fopen(path, "r");
  cr_assert_not_null(f);
  root = trace_parse_checked(slurp(f));
  fclose(f);
  cJSON_Delete(root);
  char tmp[160];
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  cr_expect_neq(access(tmp, F_OK), 0, "the temporary file is gone");
  unlink(path);
  rmdir(dir);
  snprintf(path, sizeof path, "%s/no/such/dir/trace.json", dir);
  cr_expect_eq(trace_write_file(path), -1);
  cr_expect(strstr(gpupool_last_error(), "trace_file"), "%s", gpupool_last_error());
  gpupool_destroy(p);
}

/* A full disk: the trace (a few hundred bytes, all in f's buffer until the
 * flush) cannot be written, and the status and the message say so. */
Test(trace_writer, write_to_a_full_disk_fails) {
  init_events(1024);
  gpupool *p = host_pool("full", 0, 64 * MiB);
  pc_must_malloc(p, 4096, NULL);
  FILE *f = fopen("/dev/full", "w");
  cr_assert_not_null(f);
  cr_expect_eq(gpupool_trace_write(f), GPUPOOL_ERR_BACKEND);
  cr_expect(strstr(gpupool_last_error(), "gpupool_trace_write: write failed: ") &&
                strstr(gpupool_last_error(), strerror(ENOSPC)),
            "%s", gpupool_last_error());
  fclose(f);
  gpupool_destroy(p);
}

Test(trace_writer, counter_ring_overwrites_are_counted) {
  init_events(1024);
  gpupool *p = host_pool("samples", 0, 64 * MiB);
  size_t n = trace_counters_capacity() + 10;
  for (size_t i = 0; i < n; i++)
    trace_counters_sample();
  cr_expect_eq(trace_counters_dropped(), 10);
  cJSON *root = trace_parse_checked(trace_read_all(NULL, 65536, NULL));
  cr_expect_eq(trace_count(root, "C", "pool samples allocations"), (int)trace_counters_capacity());
  cr_expect_eq(trace_other_number(root, "samples_dropped"), 10);
  cr_expect_eq(trace_other_number(root, "events_dropped"), 0, "the pool rings lost nothing");
  cJSON_Delete(root);
  trace_counters_reset();
  cr_expect_eq(trace_counters_dropped(), 0);
  root = trace_parse_checked(trace_read_all(NULL, 65536, NULL));
  cr_expect_eq(trace_count(root, "C", NULL), 0, "a reset forgets the samples");
  cJSON_Delete(root);
  gpupool_destroy(p);
}

Test(trace_writer, destroyed_pools_keep_their_samples_and_labels) {
  init_events(1024);
  gpupool *p = host_pool("gone", 3, 64 * MiB);
  pc_must_malloc(p, 4096, NULL);
  sample_apart();
  gpupool_destroy(p);
  cJSON *root = read_checked(NULL, 0);
  cr_expect_eq(trace_count(root, "C", "pool gone memory"), 1);
  const cJSON *name = find_event(root, "M", "thread_name");
  cr_assert_not_null(name);
  cr_expect(strstr(cJSON_GetObjectItem(cJSON_GetObjectItem(name, "args"), "name")->valuestring,
                   "destroyed"));
  const cJSON *proc = find_event(root, "M", "process_name");
  cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(proc, "args"), "name")->valuestring,
                   "GPU 3");
  cJSON_Delete(root);
  const char *q[] = {"pool=gone"};
  root = read_checked(q, 1);
  cr_expect_eq(trace_count(root, "C", "pool gone memory"), 1);
  cJSON_Delete(root);
}

/* CUPTI records take the same path as pool rings; fed here from a ring of
 * our own, through the merge and the formatter. */
Test(trace_writer, cupti_records_get_their_own_track_per_device) {
  event_ring *r = event_ring_create(64);
  pool_event ev[] = {
      {.ts_ns = 5000000000ull,
       .type = EV_ALLOC,
       .flags = CUPTI_EVF_POOL,
       .addr = 0x7f0000000000,
       .size = 1 << 20,
       .a = 3},
      {.ts_ns = 5000000100ull,
       .type = EV_ALLOC,
       .addr = 0x10000,
       .size = 4096,
       .a = 2,
       .b = (uint64_t)-1},
      {.ts_ns = 5000000200ull, .type = EV_FREE, .addr = 0x7f0000000000, .size = 1 << 20, .a = 3},
      {.ts_ns = 5000000300ull, .type = EV_FREE, .addr = 0x999000, .size = 64, .a = 3},
  };
  for (size_t i = 0; i < 4; i++)
    event_ring_push(r, &ev[i]);
  trace_merge *m = trace_merge_create();
  cr_assert_eq(trace_merge_add_ring(m, r, TRACE_SRC_CUPTI, 0), 0);
  cr_assert_eq(trace_merge_begin(m, 0, UINT64_MAX, 0, NULL, NULL), 0);
  json_buf out;
  json_buf_init(&out);
  trace_format f;
  cr_assert_eq(trace_format_init(&f, &out, NULL, 0, 5000000000ull), 0);
  json_puts(&out, "{\"traceEvents\":[");
  trace_record rec;
  while (trace_merge_next(m, &rec))
    trace_format_record(&f, &rec);
  json_puts(&out, "],\"displayTimeUnit\":\"ns\",\"otherData\":{\"version\":\"t\",\"hostname\":"
                  "\"h\",\"pid\":1,\"events_dropped\":0,\"baseTimeNanoseconds\":5000000000}}");
  json_putc(&out, '\0');
  cJSON *root = trace_parse_checked(strdup(out.data));
  cr_expect_eq(trace_count(root, "b", "CUDA device alloc"), 1);
  cr_expect_eq(trace_count(root, "e", "CUDA device alloc"), 1);
  cr_expect_eq(trace_count(root, "b", "CUDA pinned alloc"), 1);
  const cJSON *host = find_event(root, "b", "CUDA pinned alloc");
  cr_expect_eq(cJSON_GetObjectItem(host, "pid")->valuedouble, TRACE_HOST_PID);
  cr_expect_str_eq(
      cJSON_GetObjectItem(find_event(root, "b", "CUDA device alloc"), "cat")->valuestring, "cuda");
  const cJSON *b = find_event(root, "b", "CUDA device alloc");
  cr_expect_str_eq(arg_string(b, "owner"), "pool");
  cr_expect_str_eq(arg_string(host, "owner"), "other");
  cr_expect_eq(cJSON_GetObjectItem(b, "ts")->valuedouble, 0.0);
  cr_expect_eq(cJSON_GetObjectItem(find_event(root, "e", "CUDA device alloc"), "ts")->valuedouble,
               0.2);
  cJSON_Delete(root);
  trace_format_free(&f);
  json_buf_free(&out);
  trace_merge_destroy(m);
}

/* Each segment event's reserved_after is the pool's reserved bytes after
 * that event: the running sum of the segment events' sizes, for the first
 * segment of a pool (before: 0, the figure before its own call) and for
 * each of the segments one empty_cache returns in a batch (before: every
 * one of them gave the figure after the whole batch). The counter sample
 * taken from each event says the same. */
Test(trace_writer, segment_events_give_the_reserved_bytes_after_them) {
  init_events(4096);
  gpupool *p = host_pool("after", 0, 256 * MiB);
  void *x[4];
  const size_t sizes[] = {30 * MiB, 12 * MiB, 64 * MiB, 16 * MiB}; /* a segment each, that size */
  for (int i = 0; i < 4; i++)
    cr_assert_eq(gpupool_malloc(p, &x[i], sizes[i], NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  for (int i = 0; i < 4; i++)
    cr_assert_eq(gpupool_free(p, x[i]), GPUPOOL_OK);
  cr_assert_eq(gpupool_empty_cache(p), 122 * MiB);
  FILE *f = tmpfile();
  cr_assert_eq(gpupool_trace_write(f), GPUPOOL_OK, "%s", gpupool_last_error());
  cJSON *root = trace_parse_checked(slurp(f));
  fclose(f);
  int64_t reserved = 0;
  int allocs = 0, frees = 0;
  const cJSON *ev;
  cJSON_ArrayForEach(ev, trace_events(root)) {
    const char *ph = cJSON_GetObjectItemCaseSensitive(ev, "ph")->valuestring;
    const char *name = cJSON_GetObjectItemCaseSensitive(ev, "name")->valuestring;
    if (strcmp(ph, "X") != 0 || strncmp(name, "segment ", 8) != 0)
      continue;
    int alloc = strcmp(name, "segment alloc") == 0;
    reserved += (alloc ? 1 : -1) * (int64_t)arg_number(ev, "size");
    allocs += alloc;
    frees += !alloc;
    cr_expect_eq((int64_t)arg_number(ev, "reserved_after"), reserved, "%s of %.0f", name,
                 arg_number(ev, "size"));
  }
  cr_expect_eq(allocs, 4);
  cr_expect_eq(frees, 4);
  cr_expect_eq(reserved, 0);
  cJSON_Delete(root);
  gpupool_destroy(p);
}
