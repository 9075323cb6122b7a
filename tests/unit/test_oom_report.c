/* Every OOM explained: the report each strategy's pool gives at its final
 * failure in four cases (fragmented, truly full, larger than the device,
 * memory held by other CUDA allocations), with the remedies it computes
 * checked by applying them: an empty_cache and a retry fits iff the report
 * said "enough"; the same sequence replayed with expandable_segments:True
 * fits iff it said it would; freeing what it says is missing outside the
 * pool makes the request fit, and one byte less does not. On the host
 * backend gpupool_host_hold_other() stands in for the allocations CUPTI
 * would report as owner="other" on a GPU. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/host.h"
#include "helpers/pool_check.h"
#include "pool/oom_report.h"
#include "pool/pool_view.h"

#define MiB     PC_MiB
#define CAP     (64 * MiB)
#define MAX_OPS 128

/* The test observer keeps the newest report. */
static pool_oom_report *last;
static unsigned delivered;

static void keep(pool_oom_report *r, void *arg) {
  (void)arg;
  pool_oom_report_free(last);
  last = r;
  delivered++;
}

/* The test observer serves what it keeps, as the agent does when it keeps
 * reports and listens: the message links the report. */
static void serve(pool_oom_report *r, void *arg) {
  (void)arg;
  r->observed = 1;
}

static void observe(void) {
  pool_events_enable(4096); /* the agent's part: rings for the last events */
  pool_oom_observer o = {serve, keep, NULL};
  pool_oom_set_observer(&o);
}

static void unobserve(void) {
  pool_oom_set_observer(NULL);
  pool_oom_report_free(last);
  last = NULL;
}

/* A sequence of mallocs and frees that can be replayed on another pool. */
typedef struct oplog {
  struct {
    int is_free;
    size_t size, slot;
  } op[MAX_OPS];
  size_t n, nslots;
  void *ptr[MAX_OPS];
} oplog;

static int log_malloc(gpupool *p, oplog *l, size_t size) {
  void *ptr = NULL;
  if (gpupool_malloc(p, &ptr, size, NULL) != GPUPOOL_OK)
    return -1;
  cr_assert_lt(l->n, MAX_OPS);
  l->op[l->n].is_free = 0;
  l->op[l->n].size = size;
  l->op[l->n].slot = l->nslots;
  l->n++;
  l->ptr[l->nslots++] = ptr;
  return 0;
}

static void log_free(gpupool *p, oplog *l, size_t slot) {
  pc_must_free(p, l->ptr[slot]);
  l->op[l->n].is_free = 1;
  l->op[l->n].slot = slot;
  l->n++;
}

/* Replays l on a fresh pool, then tries `final`: whether it fits. */
static int replay_fits(gpupool_strategy strategy, const char *tunables, size_t other,
                       const oplog *l, size_t final) {
  pool_oom_set_observer(NULL); /* the replay's own OOM is not the one under test */
  gpupool *p = pc_pool(strategy, CAP, tunables);
  if (other)
    cr_assert_eq(gpupool_host_hold_other(p, other), GPUPOOL_OK);
  void *ptr[MAX_OPS] = {0};
  for (size_t i = 0; i < l->n; i++) {
    if (l->op[i].is_free)
      pc_must_free(p, ptr[l->op[i].slot]);
    else
      ptr[l->op[i].slot] = pc_must_malloc(p, l->op[i].size, NULL);
  }
  void *x = NULL;
  int fits = gpupool_malloc(p, &x, final, NULL) == GPUPOOL_OK;
  gpupool_destroy(p);
  pool_oom_observer o = {serve, keep, NULL};
  pool_oom_set_observer(&o);
  return fits;
}

static const char *sname(gpupool_strategy s) {
  return s == GPUPOOL_STRATEGY_BFC ? "bfc" : s == GPUPOOL_STRATEGY_ROUND ? "round" : "naive";
}

/* What holds for every report. */
static void check_report(gpupool *p, gpupool_strategy s, size_t final, size_t other) {
  const char *why = gpupool_last_error();
  cr_assert_not_null(last, "%s: no report was delivered", sname(s));
  cr_expect_eq(strncmp(why, "CUDA out of memory.", 19), 0, "%s: %s", sname(s), why);
  cr_expect_eq(strcmp(why, last->message), 0, "%s: last_error is the report's message", sname(s));
  cr_expect(strstr(why, "Reserved ") && strstr(why, "allocated ") && strstr(why, "device free "),
            "%s: the message keeps reserved, allocated and device free: %s", sname(s), why);
  cr_expect(strstr(why, "/oom/") && strstr(why, "/advice"), "%s: links the report and advice",
            sname(s));
  cr_expect_eq(last->size, final);
  cr_expect_str_eq(last->cap.name, "test");
  cr_expect_str_eq(last->cap.strategy, sname(s));
  cr_expect(last->device_known, "the host backend knows its device");
  cr_expect_eq(last->device_total, CAP);
  cr_expect_eq(last->other_bytes, other);
  cr_expect_eq(last->stats.num_ooms, pc_stats(p).num_ooms, "the stats include this OOM");
  cr_expect_eq(last->stats.num_alloc_retries, pc_stats(p).num_alloc_retries, "after the retry");
  /* The blocks tile their segments, and the totals match them. */
  uint64_t free_bytes = 0, reserved = 0;
  for (size_t i = 0; i < last->cap.nsegs; i++) {
    const pool_capture_segment *seg = &last->cap.segs[i];
    uint64_t at = seg->info.addr;
    for (size_t k = 0; k < seg->info.nblocks; k++) {
      const pool_block_info *b = &last->cap.blocks[seg->first_block + k];
      cr_expect_eq(b->addr, at, "%s: segment %zu block %zu is not where the last ended", sname(s),
                   i, k);
      at += b->size;
      if (!strcmp(b->state, "inactive"))
        free_bytes += b->size;
    }
    cr_expect_eq(at, seg->info.addr + seg->info.size, "%s: blocks cover segment %zu", sname(s), i);
    reserved += seg->info.size;
  }
  cr_expect_eq(last->cap.truncated, 0);
  cr_expect_eq(reserved, (uint64_t)last->stats.reserved_bytes[GPUPOOL_STAT_ALL].current);
  cr_expect_eq(free_bytes, last->ex.free_in_pool, "%s: free in pool", sname(s));
  cr_expect_eq(last->ex.outside_pool, other, "%s: memory outside the pool", sname(s));
  cr_assert_gt(last->cap.nevents, 0, "the last events are in the report");
  cr_expect_eq(last->cap.events[last->cap.nevents - 1].type, EV_OOM, "the OOM event is the last");
}

/* The empty_cache remedy, applied: an empty_cache, then the request again. */
static void check_empty_cache(gpupool *p, gpupool_strategy s, size_t final) {
  oom_answer said = last->ex.empty_cache_enough;
  cr_expect_neq(said, OOM_MAYBE, "%s: the host backend's device is known", sname(s));
  size_t freed = gpupool_empty_cache(p);
  cr_expect_eq(freed, last->ex.empty_cache_frees, "%s: empty_cache freed what was said", sname(s));
  void *x = NULL;
  int fits = gpupool_malloc(p, &x, final, NULL) == GPUPOOL_OK;
  cr_expect_eq(fits, said == OOM_YES, "%s: after empty_cache it %s, the report said %s", sname(s),
               fits ? "fits" : "does not fit", said == OOM_YES ? "enough" : "not enough");
  if (fits)
    pc_must_free(p, x);
}

/* The expandable_segments remedy, applied: the same sequence replayed on a
 * pool with expandable_segments:True (strategy bfc, which it needs). */
static void check_expandable(gpupool_strategy s, size_t other, const oplog *l, size_t final) {
  oom_answer said = last->ex.expandable;
  if (s == GPUPOOL_STRATEGY_BFC)
    cr_expect(said == OOM_YES || said == OOM_NO, "bfc: a computed answer, not %d", said);
  if (said != OOM_YES && said != OOM_NO)
    return;
  int fits = replay_fits(GPUPOOL_STRATEGY_BFC, "expandable_segments:True", other, l, final);
  if (s == GPUPOOL_STRATEGY_BFC)
    cr_expect_eq(fits, said == OOM_YES, "bfc: replayed with expandable_segments it %s",
                 fits ? "fits" : "does not fit");
  else if (said == OOM_YES) /* other roundings: its blocks were no smaller than bfc's */
    cr_expect(fits, "%s: replayed under bfc with expandable_segments it does not fit", sname(s));
}

static const gpupool_strategy strategies[] = {GPUPOOL_STRATEGY_BFC, GPUPOOL_STRATEGY_ROUND,
                                              GPUPOOL_STRATEGY_NAIVE};

Test(oom_report, truly_full) {
  for (size_t i = 0; i < 3; i++) {
    gpupool_strategy s = strategies[i];
    observe();
    gpupool *p = pc_pool(s, CAP, NULL);
    oplog l = {0};
    while (log_malloc(p, &l, 4 * MiB) == 0)
      cr_assert_lt(l.n, 64);
    check_report(p, s, 4 * MiB, 0);
    cr_expect_eq(last->ex.larger_than_device, 0);
    cr_expect_eq(last->ex.free_outside_to_fit, 0, "nothing outside the pool to free");
    check_expandable(s, 0, &l, 4 * MiB);
    if (s == GPUPOOL_STRATEGY_BFC) /* 3 segments of 20 MiB: 4 MiB of pages left over */
      cr_expect_eq(last->ex.expandable, OOM_YES);
    check_empty_cache(p, s, 4 * MiB);
    gpupool_destroy(p);
    unobserve();
  }
}

Test(oom_report, fragmented) {
  for (size_t i = 0; i < 3; i++) {
    gpupool_strategy s = strategies[i];
    observe();
    gpupool *p = pc_pool(s, CAP, NULL);
    oplog l = {0};
    while (log_malloc(p, &l, 3 * MiB) == 0)
      cr_assert_lt(l.n, 64);
    size_t n = l.nslots;
    for (size_t k = 1; k < n; k += 2)
      log_free(p, &l, k);
    void *x = NULL;
    gpupool_status st = gpupool_malloc(p, &x, 7 * MiB, NULL);
    if (s != GPUPOOL_STRATEGY_BFC) {
      /* Without splitting, freed blocks are whole cached segments: the
       * OOM retry returns them and the request is served. */
      cr_expect_eq(st, GPUPOOL_OK, "%s: %s", sname(s), gpupool_last_error());
      cr_expect_eq(pc_stats(p).num_ooms, 1, "%s: only the fill failed", sname(s));
      gpupool_destroy(p);
      unobserve();
      continue;
    }
    cr_assert_eq(st, GPUPOOL_ERR_OOM);
    check_report(p, s, 7 * MiB, 0);
    cr_expect_gt(last->ex.free_blocks, 1, "free memory in several blocks");
    cr_expect_lt(last->ex.largest_free, 7 * MiB);
    cr_expect_gt(last->ex.free_in_pool, 7 * MiB, "more free in the pool than asked");
    cr_expect_gt(last->ex.external_fragmentation, 0.5);
    cr_expect_gt(last->ex.inactive_split_bytes, 0);
    cr_expect_neq(last->ex.split_limit_mb, 0, "a max_split_size_mb is suggested");
    cr_expect(strstr(last->message, "max_split_size_mb:"), "%s", last->message);
    check_expandable(s, 0, &l, 7 * MiB);
    cr_expect_eq(last->ex.expandable, OOM_YES);
    check_empty_cache(p, s, 7 * MiB);
    gpupool_destroy(p);
    unobserve();
  }
}

/* max_split_size_mb is no remedy in an expandable pool: its range blocks
 * ignore the setting (docs/pool.md), so the report does not offer it. */
Test(oom_report, expandable_pool_gets_no_split_limit) {
  observe();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, CAP, "expandable_segments:True");
  oplog l = {0};
  while (log_malloc(p, &l, 3 * MiB) == 0)
    cr_assert_lt(l.n, 64);
  for (size_t k = 1; k < l.nslots; k += 2)
    log_free(p, &l, k);
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 30 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_assert_not_null(last);
  cr_expect_eq(last->ex.split_limit_mb, 0, "max_split_size_mb offered to an expandable pool");
  cr_expect_null(strstr(last->message, "max_split_size_mb"), "%s", last->message);
  gpupool_destroy(p);
  unobserve();
}

Test(oom_report, larger_than_the_device) {
  for (size_t i = 0; i < 3; i++) {
    gpupool_strategy s = strategies[i];
    observe();
    gpupool *p = pc_pool(s, CAP, NULL);
    oplog l = {0};
    cr_assert_neq(log_malloc(p, &l, CAP + 2 * MiB), 0);
    check_report(p, s, CAP + 2 * MiB, 0);
    cr_expect(last->ex.larger_than_device);
    cr_expect(strstr(last->message, "larger than the device"), "%s", last->message);
    check_expandable(s, 0, &l, CAP + 2 * MiB);
    if (s == GPUPOOL_STRATEGY_BFC)
      cr_expect_eq(last->ex.expandable, OOM_NO);
    check_empty_cache(p, s, CAP + 2 * MiB);
    gpupool_destroy(p);
    unobserve();
  }
}

/* The device had room by its reading, yet the allocation failed (here the
 * host backend's fault injection; on a GPU a stale reading or the driver):
 * freeing memory is not known to help, so the remedies that free it say
 * maybe, never "enough" or "would have served it", and the message says
 * why the room did not serve. */
Test(oom_report, device_had_room) {
  for (size_t i = 0; i < 3; i++) {
    gpupool_strategy s = strategies[i];
    observe();
    gpupool *p = pc_pool(s, CAP, "fault_every_n:1");
    oplog l = {0};
    cr_assert_neq(log_malloc(p, &l, 4 * MiB), 0, "%s: every device allocation fails", sname(s));
    check_report(p, s, 4 * MiB, 0);
    cr_expect(last->ex.device_had_room, "%s", sname(s));
    cr_expect_eq(last->ex.shortfall, 0);
    cr_expect_eq(last->ex.empty_cache_enough, OOM_MAYBE, "%s", sname(s));
    if (s == GPUPOOL_STRATEGY_BFC)
      cr_expect_eq(last->ex.expandable, OOM_MAYBE);
    cr_expect(strstr(last->message, "had room for the 20.00 MiB asked by its accounting") ||
                  strstr(last->message, "had room for the 2.00 MiB asked by its accounting") ||
                  strstr(last->message, "had room for the 4.00 MiB asked by its accounting"),
              "%s: %s", sname(s), last->message);
    /* The fault was injected (fault_every_n), and the message says so
     * rather than blame the host. */
    cr_expect(strstr(last->message, "fault injection (fault_every_n, fault_rate) failed the "
                                    "allocation on purpose"),
              "%s: %s", sname(s), last->message);
    cr_expect_null(strstr(last->message, "the host could not provide"), "%s", last->message);
    cr_expect_null(strstr(last->message, "(enough)"), "%s", last->message);
    gpupool_destroy(p);
    unobserve();
  }
}

Test(oom_report, other_cuda_memory) {
  const size_t other = 40 * MiB;
  for (size_t i = 0; i < 3; i++) {
    gpupool_strategy s = strategies[i];
    observe();
    gpupool *p = pc_pool(s, CAP, NULL);
    cr_assert_eq(gpupool_host_hold_other(p, other), GPUPOOL_OK);
    oplog l = {0};
    while (log_malloc(p, &l, 4 * MiB) == 0)
      cr_assert_lt(l.n, 64);
    check_report(p, s, 4 * MiB, other);
    cr_expect(strstr(last->message, "other CUDA allocations 40.00 MiB"), "%s", last->message);
    uint64_t fit = last->ex.free_outside_to_fit;
    cr_assert_gt(fit, 0, "%s: freeing outside the pool is the remedy", sname(s));
    cr_assert_leq(fit, other);
    cr_expect_not(last->ex.outside_not_enough);
    check_expandable(s, other, &l, 4 * MiB);
    check_empty_cache(p, s, 4 * MiB);
    /* Applied: one byte less than said does not fit; what it said does. */
    void *x = NULL;
    cr_assert_eq(gpupool_host_hold_other(p, other - fit + 1), GPUPOOL_OK);
    cr_expect_eq(gpupool_malloc(p, &x, 4 * MiB, NULL), GPUPOOL_ERR_OOM, "%s", sname(s));
    cr_assert_eq(gpupool_host_hold_other(p, other - fit), GPUPOOL_OK);
    cr_expect_eq(gpupool_malloc(p, &x, 4 * MiB, NULL), GPUPOOL_OK, "%s: %s", sname(s),
                 gpupool_last_error());
    gpupool_destroy(p);
    unobserve();
  }
}

/* Memory outside the pool too small to cover the shortfall: freeing it is
 * no remedy, and the message says so; applied, the request still fails.
 * The strategies that take a 20 MiB request as 20 MiB (round takes 32 MiB,
 * and its shortfall is then 4 MiB: other_cuda_memory's case). */
Test(oom_report, other_cuda_memory_too_small_to_free) {
  const size_t other = 4 * MiB;
  const gpupool_strategy exact[] = {GPUPOOL_STRATEGY_BFC, GPUPOOL_STRATEGY_NAIVE};
  for (size_t i = 0; i < 2; i++) {
    gpupool_strategy s = exact[i];
    observe();
    gpupool *p = pc_pool(s, CAP, NULL);
    cr_assert_eq(gpupool_host_hold_other(p, other), GPUPOOL_OK);
    oplog l = {0};
    while (log_malloc(p, &l, 20 * MiB) == 0)
      cr_assert_lt(l.n, 8);
    check_report(p, s, 20 * MiB, other);
    cr_expect_gt(last->ex.shortfall, other, "%s: short by more than is held outside", sname(s));
    cr_expect_eq(last->ex.free_outside_to_fit, 0, "%s: not a remedy", sname(s));
    cr_expect(last->ex.outside_not_enough, "%s", sname(s));
    cr_expect_null(strstr(last->message, "it fits if"), "%s", last->message);
    cr_expect(strstr(last->message, "freeing all 4.00 MiB held outside this pool would not be "
                                    "enough."),
              "%s", last->message);
    /* Applied: with nothing held outside it still does not fit. */
    void *x = NULL;
    cr_assert_eq(gpupool_host_hold_other(p, 0), GPUPOOL_OK);
    cr_expect_eq(gpupool_malloc(p, &x, 20 * MiB, NULL), GPUPOOL_ERR_OOM, "%s", sname(s));
    gpupool_destroy(p);
    unobserve();
  }
}

Test(oom_report, without_an_observer_the_message_still_explains) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, CAP, NULL);
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, CAP + MiB, NULL), GPUPOOL_ERR_OOM);
  const char *why = gpupool_last_error();
  cr_expect_eq(strncmp(why, "CUDA out of memory.", 19), 0, "%s", why);
  cr_expect(strstr(why, "larger than the device"), "%s", why);
  cr_expect_null(strstr(why, "/oom/"), "no agent, no report link: %s", why);
  gpupool_destroy(p);
}

Test(oom_report, host_hold_other_refuses_bad_input) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, CAP, NULL);
  cr_expect_eq(gpupool_host_hold_other(NULL, MiB), GPUPOOL_ERR_INVALID);
  void *x = pc_must_malloc(p, 30 * MiB, NULL);
  cr_expect_eq(gpupool_host_hold_other(p, 40 * MiB), GPUPOOL_ERR_OOM, "does not fit");
  cr_expect(strstr(gpupool_last_error(), "do not fit"), "%s", gpupool_last_error());
  cr_expect_eq(gpupool_host_hold_other(p, 34 * MiB), GPUPOOL_OK);
  cr_expect_eq(gpupool_host_hold_other(p, 0), GPUPOOL_OK);
  pc_must_free(p, x);
  gpupool_destroy(p);
}

/* s is well-formed UTF-8 (no sequence cut short). */
static int utf8_whole(const char *s) {
  const unsigned char *p = (const unsigned char *)s;
  while (*p) {
    int n = *p < 0x80             ? 0
            : (*p & 0xe0) == 0xc0 ? 1
            : (*p & 0xf0) == 0xe0 ? 2
            : (*p & 0xf8) == 0xf0 ? 3
                                  : -1;
    if (n < 0)
      return 0;
    p++;
    for (int i = 0; i < n; i++, p++)
      if ((*p & 0xc0) != 0x80)
        return 0;
  }
  return 1;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* The longest pool name (127 bytes, here of two-byte UTF-8 characters) with
 * a memory_fraction cap, fragmentation and memory held outside the pool:
 * the message keeps its remedies and ends with the report link (it was cut
 * at 1023 bytes, mid-word, before the link). */
Test(oom_report, a_long_name_and_every_clause_keep_the_remedies_and_the_link) {
  observe();
  char name[128] = "";
  for (int i = 0; i < 63; i++)
    strcat(name, "\xc3\xa9"); /* é */
  strcat(name, "x");
  cr_assert_eq(strlen(name), 127);
  gpupool_options o = {.name = name,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .host_capacity = CAP,
                       .tunables = "memory_fraction:0.95",
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_host_hold_other(p, MiB), GPUPOOL_OK);
  void *a[12];
  for (int i = 0; i < 12; i++)
    a[i] = pc_must_malloc(p, 5 * MiB, NULL);
  for (int i = 0; i < 12; i += 2)
    pc_must_free(p, a[i]);
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 7 * MiB, NULL), GPUPOOL_ERR_OOM);
  const char *why = gpupool_last_error();
  cr_expect(strstr(why, name), "the whole name: %s", why);
  cr_expect(strstr(why, "limit ") && strstr(why, "(memory_fraction 0.95)"), "%s", why);
  cr_expect(strstr(why, " Remedies: "), "%s", why);
  cr_expect(strstr(why, "max_split_size_mb:21"), "%s", why);
  cr_expect(strstr(why, "expandable_segments:True"), "%s", why);
  char link[64];
  snprintf(link, sizeof link, " Report: /oom/%llu, advice: /advice on the gpupool agent.",
           (unsigned long long)last->id);
  cr_expect(ends_with(why, link), "the message ends with the report link (%zu bytes): %s",
            strlen(why), why);
  cr_expect_null(strstr(why, "[cut short"), "nothing is left out: %s", why);
  cr_expect(utf8_whole(why), "%s", why);
  cr_expect_str_eq(why, last->message);
  for (int i = 1; i < 12; i += 2)
    pc_must_free(p, a[i]);
  gpupool_destroy(p);
  unobserve();
}

/* The longest explanation the code writes: every number as long as 64 bits
 * make it, the longest name, sources and every remedy. It does not fit
 * gpupool_last_error()'s buffer; the message is what fits of it, cut between
 * clauses (never inside a word or a UTF-8 sequence), and keeps the link. */
Test(oom_report, the_longest_message_is_cut_between_clauses_and_keeps_the_link) {
  pool_oom_report *r = calloc(1, sizeof *r);
  cr_assert_not_null(r);
  r->id = UINT64_MAX;
  r->size = r->rounded = r->segment_size = UINT64_MAX / 2;
  for (int i = 0; i < 42; i++)
    strcat(r->cap.name, "\xe2\x82\xac"); /* €, three bytes */
  strcat(r->cap.name, "x");
  r->cap.device = -2147483647;
  r->cap.backend = "cuda_async";
  r->cap.strategy = "round";
  r->cap.max_split_size = UINT64_MAX;
  r->stats.reserved_bytes[GPUPOOL_STAT_ALL].current = INT64_MAX;
  r->stats.allocated_bytes[GPUPOOL_STAT_ALL].current = INT64_MAX / 3;
  r->stats.inactive_split_bytes[GPUPOOL_STAT_ALL].current = INT64_MAX / 5;
  r->has_limit = 1;
  r->limit = UINT64_MAX - 1;
  r->memory_fraction = 0.123456789;
  r->device_known = 1;
  r->device_free = 1;
  r->device_total = UINT64_MAX - 2;
  memset(r->device_source, 'd', sizeof r->device_source - 1);
  r->other_known = 1;
  r->other_bytes = UINT64_MAX - 3;
  memset(r->other_source, 'o', sizeof r->other_source - 1);
  r->cap.t.page_size = 2 * MiB;
  r->cap.t.free_blocks = UINT64_MAX;
  r->cap.t.free_bytes = UINT64_MAX - 4;
  r->cap.t.largest_free = UINT64_MAX / 7;
  r->cap.t.cached_bytes = UINT64_MAX / 9;
  r->cap.t.split_free_bytes = UINT64_MAX - 5;
  r->cap.t.split_free_at_least = UINT64_MAX / 11;
  r->cap.t.small_reserved = UINT64_MAX / 13;
  r->cap.t.other_stream_free = r->cap.t.other_pool_free = r->cap.t.rules_free = UINT64_MAX - 9;
  r->cap.t.other_stream_largest = r->cap.t.other_pool_largest = r->cap.t.rules_largest =
      UINT64_MAX / 2;
  r->ex.split_limit_mb = UINT64_MAX / MiB;
  r->observed = 1;
  pool_oom_explain(r);
  const char *m = r->message;
  cr_expect(r->message_cut);
  cr_expect_lt(strlen(m), sizeof r->message);
  cr_expect(strstr(m, "on other streams") && strstr(m, "Remedies:"), "%s", m);
  cr_expect(strncmp(m, "CUDA out of memory. ", 20) == 0, "%s", m);
  cr_expect(strstr(m, r->cap.name), "the whole name: %s", m);
  cr_expect(ends_with(m, " Report: /oom/18446744073709551615, advice: /advice on the gpupool "
                         "agent."),
            "%s", m);
  cr_expect(utf8_whole(m), "%s", m);
  /* what is left out, is left out between clauses */
  const char *mark = strstr(m, " [cut short: the report has the rest] Report: /oom/");
  cr_assert_not_null(mark, "%s", m);
  cr_expect(mark[-1] == '.', "cut inside a clause: %s", m);
  r->observed = 0; /* no report served: no link, and nothing to point at for the rest */
  pool_oom_explain(r);
  cr_expect(ends_with(r->message, ". [cut short]"), "%s", r->message);
  cr_expect_null(strstr(r->message, "/oom/"));
  free(r);
}

/* A 5 MiB request on a 16 MiB device: the request fits the device, its
 * 20 MiB segment does not. Not "larger than the device: no setting makes it
 * fit": expandable_segments:True, which maps only its pages, serves it. */
Test(oom_report, a_segment_larger_than_the_device_is_not_a_request_larger_than_it) {
  observe();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 16 * MiB, NULL);
  oplog l = {0};
  cr_assert_neq(log_malloc(p, &l, 5 * MiB), 0, "a 20 MiB segment on a 16 MiB device");
  cr_assert_not_null(last);
  const char *m = last->message;
  cr_expect_null(strstr(m, "no setting makes it fit"), "%s", m);
  cr_expect_null(strstr(m, "request is larger than the device"), "%s", m);
  cr_expect(strstr(m, "The request fits the device (16.00 MiB), but the 20.00 MiB segment it "
                      "takes does not"),
            "%s", m);
  cr_expect(strstr(m, "expandable_segments:True would have served it"), "%s", m);
  cr_expect_eq(last->ex.larger_than_device, 0);
  cr_expect_eq(last->ex.expandable, OOM_YES);
  /* Applied: replayed with expandable_segments:True it fits. */
  pool_oom_set_observer(NULL);
  gpupool *x = pc_pool(GPUPOOL_STRATEGY_BFC, 16 * MiB, "expandable_segments:True");
  void *ptr = NULL;
  cr_expect_eq(gpupool_malloc(x, &ptr, 5 * MiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_destroy(x);
  gpupool_destroy(p);
  unobserve();
}

/* Blocks serve only their stream: a free block large enough on another
 * stream is not the request's, and the message says that is why (it showed
 * a largest free block above the request with no fragmentation and no
 * reason). */
Test(oom_report, free_blocks_of_another_stream_are_named_as_the_reason) {
  observe();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, CAP, NULL);
  gpupool_host_stream *s1 = gpupool_host_stream_create();
  void *a = pc_must_malloc(p, 5 * MiB, s1); /* a 20 MiB segment on s1: 15 MiB free there */
  void *b = pc_must_malloc(p, 20 * MiB, NULL), *c = pc_must_malloc(p, 20 * MiB, NULL);
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 7 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_assert_not_null(last);
  const char *m = last->message;
  cr_expect(strstr(m, "largest 15.00 MiB (external fragmentation 0%)"), "%s", m);
  cr_expect(strstr(m, "The free blocks large enough for it are on other streams (15.00 MiB free "
                      "there, largest 15.00 MiB): a block serves only the stream it was "
                      "allocated on."),
            "%s", m);
  pc_must_free(p, a);
  pc_must_free(p, b);
  pc_must_free(p, c);
  gpupool_host_stream_destroy(s1);
  gpupool_destroy(p);
  unobserve();
}

/* A small request (up to 1 MiB) takes small-pool blocks only: free
 * large-pool blocks larger than it do not serve it, the message says so,
 * and max_split_size_mb (a setting of large blocks) is not suggested. */
Test(oom_report, a_small_request_is_told_large_pool_blocks_do_not_serve_it) {
  observe();
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, CAP, NULL);
  void *a[12], *s[64];
  for (int i = 0; i < 12; i++)
    a[i] = pc_must_malloc(p, 5 * MiB, NULL);
  for (int i = 0; i < 12; i += 2)
    pc_must_free(p, a[i]);
  int n = 0;
  while (n < 64 && gpupool_malloc(p, &s[n], 512 * 1024, NULL) == GPUPOOL_OK)
    n++;
  cr_assert_lt(n, 64);
  cr_assert_not_null(last);
  const char *m = last->message;
  cr_expect(strstr(m, "A request of at most 1 MiB takes small-pool blocks: the 30.00 MiB free in "
                      "large-pool blocks (largest 5.00 MiB) cannot serve it."),
            "%s", m);
  cr_expect_null(strstr(m, "max_split_size_mb"), "%s", m);
  for (int i = 0; i < n; i++)
    pc_must_free(p, s[i]);
  for (int i = 1; i < 12; i += 2)
    pc_must_free(p, a[i]);
  gpupool_destroy(p);
  unobserve();
}

/* A report copies at most OOM_REPORT_MAX_SEGMENTS segments (1024), whole,
 * as it copies at most 4096 blocks: a pool of 1100 one-block segments (large
 * tensors) is truncated, its totals still cover every segment. */
Test(oom_report, segments_are_bounded_as_blocks_are, .timeout = 120) {
  observe();
  const size_t nseg = 1100;
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, nseg * 12 * MiB + 8 * MiB, NULL);
  for (size_t i = 0; i < nseg; i++)
    pc_must_malloc(p, 12 * MiB, NULL);
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 64 * MiB, NULL), GPUPOOL_ERR_OOM);
  cr_assert_not_null(last);
  cr_expect(last->cap.truncated, "not every segment copied");
  cr_expect_leq(last->cap.nsegs, 1024);
  cr_expect_eq(last->cap.t.segments, nseg, "the totals cover every segment");
  cr_expect_eq(last->cap.t.blocks, nseg);
  gpupool_destroy(p);
  unobserve();
}
