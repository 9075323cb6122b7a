/* oom_report.h: capture at the pool's final OOM, explanation, delivery. */
#include "oom_report.h"

#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/c_numeric.h"
#include "core/clock.h"
#include "core/errors.h"
#include "pool_internal.h"
#include "segment.h"
#include "sizeclass.h"

static pthread_mutex_t observer_lock = PTHREAD_MUTEX_INITIALIZER;
static pool_oom_observer observer; /* under observer_lock */
static _Atomic int observer_set;
static _Atomic uint64_t next_id = 1;
static _Thread_local pool_oom_report *pending; /* captured, not yet delivered */

/* fork(): the observer is the parent's agent's, which serves nothing in the
 * child, and a thread of the parent may have held observer_lock at the fork
 * (delivering a report): the child starts with the lock anew and no
 * observer, its reports explained in gpupool_last_error() only. */
static void forget_observer_in_child(void) {
  pthread_mutex_init(&observer_lock, NULL);
  memset(&observer, 0, sizeof observer);
  atomic_store(&observer_set, 0);
}

static void register_atfork(void) {
  pthread_atfork(NULL, NULL, forget_observer_in_child);
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

void pool_oom_set_observer(const pool_oom_observer *o) {
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&observer_lock);
  if (o)
    observer = *o;
  else
    memset(&observer, 0, sizeof observer);
  atomic_store(&observer_set, o != NULL);
  pthread_mutex_unlock(&observer_lock);
}

void pool_oom_report_free(pool_oom_report *r) {
  if (!r)
    return;
  pool_capture_free(&r->cap);
  free(r);
}

static uint64_t round_up(uint64_t v, uint64_t to) {
  return to ? (v + to - 1) / to * to : v;
}

/* What the pool knows of the device without calling it: the host backend's
 * own accounting (a simulated device: reading it is no device call), else
 * the last cudaMemGetInfo the pool made (garbage_collection_threshold,
 * reserve_percent). */
static void device_reading(gpupool *p, pool_oom_report *r) {
  if (backend_is_host(p->be)) {
    size_t f = 0, t = 0;
    if (p->be->ops->mem_info(p->be, &f, &t) == GPUPOOL_OK) {
      r->device_known = 1;
      r->device_free = f;
      r->device_total = t;
      snprintf(r->device_source, sizeof r->device_source, "host backend accounting");
    }
    r->other_known = 1;
    r->other_bytes = backend_host_other(p->be);
    snprintf(r->other_source, sizeof r->other_source, "simulated by the host backend");
    return;
  }
  if (p->seen_ns) {
    r->device_known = 1;
    r->device_free = p->seen_free;
    r->device_total = p->seen_total;
    r->device_age_ns = r->time_ns > p->seen_ns ? r->time_ns - p->seen_ns : 0;
    snprintf(r->device_source, sizeof r->device_source, "the pool's last cudaMemGetInfo");
  } else if (p->device_total) { /* the device's size, asked once: enough to see it never fits */
    r->device_total = p->device_total;
  }
}

void pool_oom_capture(gpupool *p, void *stream, size_t size, size_t rounded, size_t segsize) {
  pool_oom_report_free(pending);
  pending = NULL;
  pool_oom_report *r = calloc(1, sizeof *r);
  if (!r)
    return; /* the failure still has its short reason */
  r->id = atomic_fetch_add(&next_id, 1);
  r->time_ns = clock_realtime_ns();
  r->size = size;
  r->rounded = rounded;
  r->segment_size = segsize;
  r->stream = (uint64_t)(uintptr_t)stream;
  /* The device allocation that failed last said why in last_error, which
   * begins with HOST_INJECTED_FAULT when the host backend's fault injection
   * failed it. */
  r->injected_fault = backend_is_host(p->be) && strncmp(gpupool_last_error(), HOST_INJECTED_FAULT,
                                                        sizeof HOST_INJECTED_FAULT - 1) == 0;
  /* Blocks and events are copied only for an observer to keep. */
  int keep = atomic_load(&observer_set);
  uint64_t limit =
      rounded > 21 * (uint64_t)MiB ? (rounded + (uint64_t)MiB - 1) / (uint64_t)MiB : 21;
  pool_capture_limits lim = {.max_segments = keep ? OOM_REPORT_MAX_SEGMENTS : 0,
                             .max_blocks = keep ? OOM_REPORT_MAX_BLOCKS : 0,
                             .max_runs = keep ? OOM_REPORT_MAX_RUNS : 0,
                             .max_events = keep ? OOM_REPORT_MAX_EVENTS : 0,
                             .split_limit = limit * (uint64_t)MiB,
                             .request = 1,
                             .stream = r->stream,
                             .rounded = rounded};
  if (pool_capture_take_limited(p, 1, &lim, &r->cap) != 0) {
    free(r);
    return;
  }
  r->ex.split_limit_mb = limit;
  size_t cap = segment_reserved_limit(p);
  r->has_limit = cap != SIZE_MAX;
  r->limit = r->has_limit ? cap : 0;
  r->memory_fraction = gpupool_memory_fraction(p);
  r->limit_refused = p->limit_refused;
  stats_collect(p, &r->stats);
  device_reading(p, r);
  pending = r;
}

static const char *bytes(char *buf, size_t n, uint64_t v) {
  static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double d = (double)v;
  int u = 0;
  while (d >= 1024.0 && u < 4) {
    d /= 1024.0;
    u++;
  }
  if (u == 0)
    snprintf(buf, n, "%" PRIu64 " B", v);
  else
    snprintf(buf, n, "%.2f %s", d, unit[u]);
  return buf;
}

static void compute(pool_oom_report *r) {
  oom_explanation *e = &r->ex;
  const pool_capture_totals *t = &r->cap.t;
  int large = size_is_large(r->rounded);
  uint64_t P = t->page_size;
  e->need = r->cap.expandable && large ? round_up(r->rounded, P) : r->segment_size;
  int64_t reserved = r->stats.reserved_bytes[GPUPOOL_STAT_ALL].current;
  int64_t allocated = r->stats.allocated_bytes[GPUPOOL_STAT_ALL].current;
  e->free_in_pool = reserved > allocated ? (uint64_t)(reserved - allocated) : 0;
  e->free_blocks = t->free_blocks;
  e->largest_free = t->largest_free;
  e->external_fragmentation =
      t->free_bytes ? 1.0 - (double)t->largest_free / (double)t->free_bytes : 0.0;
  e->inactive_split_bytes = (uint64_t)r->stats.inactive_split_bytes[GPUPOOL_STAT_ALL].current;
  if (r->device_known) {
    uint64_t used = r->device_total > r->device_free ? r->device_total - r->device_free : 0;
    e->outside_known = 1;
    e->outside_pool = used > t->reserved ? used - t->reserved : 0;
    e->shortfall = e->need > r->device_free ? e->need - r->device_free : 0;
    e->device_had_room = e->shortfall == 0;
  }
  if (r->limit_refused) { /* the cap refused, not the device: measured against the cap */
    uint64_t after = t->reserved + e->need;
    e->shortfall = after > r->limit ? after - r->limit : 0;
    e->device_had_room = 0;
    if (r->device_total && after <= r->device_total) /* rounded up: a fraction that suffices */
      e->fraction_needed = ceil((double)after / (double)r->device_total * 1000.0) / 1000.0;
  }
  /* Only the request itself larger than the device is beyond every
   * setting; a block or segment it is rounded to that is larger is the
   * rounding's (a 5 MiB request takes a 20 MiB segment). */
  if (r->device_total) {
    e->larger_than_device = r->size > r->device_total;
    e->segment_larger_than_device =
        !e->larger_than_device && (r->rounded > r->device_total || e->need > r->device_total);
  }
  /* Only where the device had room does the last try's reason explain the
   * failure (a request refused before any try leaves an older reason in
   * last_error). */
  e->injected_fault = r->injected_fault && e->device_had_room;
  e->usable_largest = t->usable_largest;
  e->other_stream_free = t->other_stream_free;
  e->other_stream_largest = t->other_stream_largest;
  e->other_pool_free = t->other_pool_free;
  e->other_pool_largest = t->other_pool_largest;
  e->rules_free = t->rules_free;
  e->rules_largest = t->rules_largest;
  /* empty_cache returns the segments that hold no live block. */
  e->empty_cache_frees = t->cached_bytes;
  if (r->limit_refused)
    e->empty_cache_enough = e->empty_cache_frees >= e->shortfall ? OOM_YES : OOM_NO;
  else if (e->device_had_room)
    e->empty_cache_enough = OOM_MAYBE;
  else if (e->empty_cache_frees >= e->need)
    e->empty_cache_enough = OOM_YES;
  else if (r->device_known)
    e->empty_cache_enough = r->device_free + e->empty_cache_frees >= e->need ? OOM_YES : OOM_NO;
  else
    e->empty_cache_enough = OOM_MAYBE;
  /* expandable_segments: large blocks hold only the pages under them, so
   * the pool would hold its small segments, the pages of its live large
   * blocks and the request's pages: between these bounds (blocks sharing a
   * page, or not). */
  if (r->cap.expandable || !P) {
    e->expandable = OOM_NOT_APPLICABLE;
  } else {
    uint64_t add = large ? round_up(r->rounded, P) : r->segment_size;
    e->expandable_high = t->small_reserved + t->large_live_pages * P + add;
    e->expandable_low = t->small_reserved + (large ? round_up(t->large_live_bytes + r->rounded, P)
                                                   : round_up(t->large_live_bytes, P) + add);
    int bfc = strcmp(r->cap.strategy, "bfc") == 0; /* other roundings differ */
    if (!r->device_known && !r->limit_refused) {
      e->expandable = OOM_MAYBE;
    } else {
      /* The device's room, and under a cap that refused, the cap's: a firm
       * yes needs the device's reading too. */
      e->expandable_room = r->device_known ? r->device_total - e->outside_pool : UINT64_MAX;
      if (r->limit_refused && r->limit < e->expandable_room)
        e->expandable_room = r->limit;
      if (e->device_had_room) /* never with limit_refused */
        e->expandable = OOM_MAYBE;
      else if (e->expandable_high <= e->expandable_room)
        e->expandable = r->device_known ? OOM_YES : OOM_MAYBE;
      else if (bfc && e->expandable_low > e->expandable_room)
        e->expandable = OOM_NO;
      else
        e->expandable = OOM_MAYBE;
    }
  }
  /* max_split_size_mb:N, N the request in MiB (at least 21): blocks of
   * segments that large are not split, so only the free blocks of smaller
   * split segments stay stranded. Not a remedy in an expandable pool: its
   * range blocks ignore the setting (docs/pool.md); nor for a small
   * request, which takes small-pool blocks (the setting is about large
   * ones). */
  uint64_t limit = e->split_limit_mb * (uint64_t)MiB;
  if (t->split_free_bytes && !r->cap.expandable && large &&
      (r->cap.max_split_size == UINT64_MAX || r->cap.max_split_size > limit)) {
    e->split_unstranded = t->split_free_at_least;
    e->split_at_most = t->split_free_bytes - t->split_free_at_least;
  } else {
    e->split_limit_mb = 0;
  }
  /* Freeing outside the pool is a remedy only where what is held there
   * covers the rest of the shortfall. */
  if (!r->limit_refused && r->device_known && e->shortfall > e->empty_cache_frees &&
      e->outside_pool) {
    uint64_t rest = e->shortfall - e->empty_cache_frees;
    if (rest <= e->outside_pool)
      e->free_outside_to_fit = rest;
    else
      e->outside_not_enough = 1;
  }
}

static const char *answer(oom_answer a, const char *yes, const char *no, const char *maybe) {
  return a == OOM_YES ? yes : a == OOM_NO ? no : maybe;
}

/* The message, clause by clause: a clause that does not fit whole (with
 * `keep` bytes left for the end: the cut mark and the report link) is left
 * out, and every one after it, so that the message is never cut inside a
 * clause, a word or a UTF-8 sequence (the pool's name is the only text
 * that is not ASCII, and its clause always fits). */
typedef struct msg {
  char *s;
  size_t n, len;
  size_t keep;
  int cut;     /* a clause was left out */
  int compact; /* without the parenthetical details (the report has them) */
} msg;

#define CLAUSE_MAX 512 /* the longest clause: the first, with a 127-byte name */

__attribute__((format(printf, 2, 3))) static void add(msg *m, const char *fmt, ...) {
  if (m->cut)
    return;
  char clause[CLAUSE_MAX];
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(clause, sizeof clause, fmt, ap);
  va_end(ap);
  if (w < 0)
    return;
  if ((size_t)w >= sizeof clause || m->len + (size_t)w + m->keep >= m->n) {
    m->cut = 1;
    return;
  }
  memcpy(m->s + m->len, clause, (size_t)w + 1);
  m->len += (size_t)w;
}

/* The free blocks that looked large enough and why the request could not
 * take them (another stream's, the other size pool's, the strategy's
 * rules): without it, a largest free block above the request and no
 * fragmentation would read as a contradiction. */
static void add_unusable(msg *m, const pool_oom_report *r) {
  const oom_explanation *e = &r->ex;
  char a[32], b[32], c[32];
  int large = size_is_large(r->rounded);
  if (e->other_stream_largest >= r->rounded)
    add(m,
        " The free blocks large enough for it are on other streams (%s free there, largest %s): "
        "a block serves only the stream it was allocated on.",
        bytes(a, sizeof a, e->other_stream_free), bytes(b, sizeof b, e->other_stream_largest));
  if (e->other_pool_largest >= r->rounded)
    add(m,
        " A request %s takes %s-pool blocks: the %s free in %s-pool blocks (largest %s) cannot "
        "serve it.",
        large ? "over 1 MiB" : "of at most 1 MiB", large ? "large" : "small",
        bytes(a, sizeof a, e->other_pool_free), large ? "small" : "large",
        bytes(b, sizeof b, e->other_pool_largest));
  if (e->rules_largest >= r->rounded && strcmp(r->cap.strategy, "bfc") == 0)
    add(m,
        " Its free blocks of max_split_size (%s) or more (%s, largest %s) are not split: they "
        "serve only requests of that size or more within max_non_split_rounding_mb of theirs.",
        bytes(a, sizeof a, r->cap.max_split_size), bytes(b, sizeof b, e->rules_free),
        bytes(c, sizeof c, e->rules_largest));
  else if (e->rules_largest >= r->rounded)
    add(m,
        " Strategy %s takes a free block of the rounded size only: its other free blocks (%s, "
        "largest %s) cannot serve it.",
        r->cap.strategy, bytes(a, sizeof a, e->rules_free), bytes(b, sizeof b, e->rules_largest));
}

/* Why the failure is not the device's memory, or is beyond the settings. */
static void add_cause(msg *m, const pool_oom_report *r) {
  const oom_explanation *e = &r->ex;
  char a[32], b[32];
  int hopeless = e->larger_than_device || (e->segment_larger_than_device && r->cap.expandable);
  if (e->larger_than_device)
    add(m, " The request is larger than the device (%s): no setting makes it fit.",
        bytes(a, sizeof a, r->device_total));
  else if (hopeless)
    add(m, " The %s whole pages it needs are more than the device (%s): no setting makes it fit.",
        bytes(a, sizeof a, e->need), bytes(b, sizeof b, r->device_total));
  else if (e->segment_larger_than_device && r->rounded > r->device_total)
    add(m, " The request fits the device (%s), but the %s block strategy %s rounds it to does not.",
        bytes(a, sizeof a, r->device_total), bytes(b, sizeof b, r->rounded), r->cap.strategy);
  else if (e->segment_larger_than_device)
    add(m,
        " The request fits the device (%s), but the %s segment it takes does not: with "
        "expandable_segments:True it would take only its own 2 MiB pages.",
        bytes(a, sizeof a, r->device_total), bytes(b, sizeof b, e->need));
  else if (r->limit_refused)
    add(m,
        " The pool's limit refused it, not the device: it needs %s more than memory_fraction "
        "%g allows.",
        bytes(a, sizeof a, e->shortfall), r->memory_fraction);
  else if (e->device_had_room && e->injected_fault)
    add(m,
        " The device had room for the %s asked by its accounting: the host backend's fault "
        "injection (fault_every_n, fault_rate) failed the allocation on purpose.",
        bytes(a, sizeof a, e->need));
  else if (e->device_had_room && strcmp(r->cap.backend, "host") == 0)
    add(m,
        " The device had room for the %s asked by its accounting: the host could not provide "
        "the memory the host backend simulates it with.",
        bytes(a, sizeof a, e->need));
  else if (e->device_had_room)
    add(m,
        " The device had room for the %s asked by a reading %.1f s old: memory was taken "
        "since, or the driver refused for another reason.",
        bytes(a, sizeof a, e->need), (double)r->device_age_ns / 1e9);
}

static void add_remedies(msg *m, const pool_oom_report *r) {
  const oom_explanation *e = &r->ex;
  char a[32], b[32], c[32];
  add(m, " Remedies:");
  if (r->limit_refused && e->fraction_needed > 0)
    add(m, " memory_fraction %.3f would allow it%s;", e->fraction_needed,
        m->compact ? "" : " (set_per_process_memory_fraction)");
  else if (r->limit_refused)
    add(m, " no memory_fraction would allow it (the device's size is %s);",
        r->device_total ? "smaller" : "unknown");
  add(m, " an empty_cache would free %s (%s);", bytes(a, sizeof a, e->empty_cache_frees),
      answer(e->empty_cache_enough, "enough", "not enough", "enough unknown"));
  if (e->expandable == OOM_NOT_APPLICABLE)
    add(m, " expandable_segments %s;",
        r->cap.expandable ? "is already on" : "is not available on this backend");
  else if (m->compact)
    add(m, " expandable_segments:True%s %s;",
        strcmp(r->cap.strategy, "bfc") ? " (with strategy bfc)" : "",
        answer(e->expandable, "would have served it", "would not have served it",
               "might have served it"));
  else
    add(m, " expandable_segments:True%s %s (it would hold %s to %s of %s usable);",
        strcmp(r->cap.strategy, "bfc") ? " (with strategy bfc)" : "",
        answer(e->expandable, "would have served it", "would not have served it",
               "might have served it"),
        bytes(a, sizeof a, e->expandable_low), bytes(b, sizeof b, e->expandable_high),
        r->device_known ? bytes(c, sizeof c, e->expandable_room) : "an unknown amount");
  if (e->split_limit_mb && e->split_unstranded && m->compact)
    add(m, " max_split_size_mb:%" PRIu64 " leaves at most %s in splits;", e->split_limit_mb,
        bytes(a, sizeof a, e->split_at_most));
  else if (e->split_limit_mb && e->split_unstranded)
    add(m,
        " max_split_size_mb:%" PRIu64 " leaves at most %s in splits (%s free now in larger "
        "split segments);",
        e->split_limit_mb, bytes(a, sizeof a, e->split_at_most),
        bytes(b, sizeof b, e->split_unstranded));
  else if (e->split_limit_mb)
    add(m,
        " max_split_size_mb:%" PRIu64 " would not help (the %s free in splits lie in "
        "smaller segments);",
        e->split_limit_mb, bytes(a, sizeof a, e->split_at_most));
  if (e->free_outside_to_fit)
    add(m, " it fits if %s held outside this pool is freed;",
        bytes(a, sizeof a, e->free_outside_to_fit));
  else if (e->outside_not_enough)
    add(m, " freeing all %s held outside this pool would not be enough;",
        bytes(a, sizeof a, e->outside_pool));
}

/* write_message's text, in the program's locale; compact: without the
 * parenthetical details. Whether a clause was left out. */
static int write_message_text(pool_oom_report *r, int compact) {
  const oom_explanation *e = &r->ex;
  char a[32], b[32], c[32];
  /* The end, always there: the cut mark (where clauses were left out) and
   * the report link. */
  char link[128] = "";
  if (r->observed)
    snprintf(link, sizeof link, " Report: /oom/%" PRIu64 ", advice: /advice on the gpupool agent.",
             r->id);
  static const char mark_report[] = " [cut short: the report has the rest]";
  static const char mark[] = " [cut short]";
  const char *cut_mark = r->observed ? mark_report : mark;
  msg m = {r->message, sizeof r->message, 0, strlen(link) + strlen(cut_mark), 0, compact};
  r->message[0] = '\0';
  add(&m,
      "CUDA out of memory. Tried to allocate %s (block %s, from the device %s) in pool '%s' "
      "on device %d (%s, %s).",
      bytes(a, sizeof a, r->size), bytes(b, sizeof b, r->rounded), bytes(c, sizeof c, e->need),
      r->cap.name, r->cap.device, r->cap.backend, r->cap.strategy);
  add(&m, " Reserved %s, allocated %s;",
      bytes(a, sizeof a, (uint64_t)r->stats.reserved_bytes[GPUPOOL_STAT_ALL].current),
      bytes(b, sizeof b, (uint64_t)r->stats.allocated_bytes[GPUPOOL_STAT_ALL].current));
  if (r->has_limit)
    add(&m, " limit %s (memory_fraction %g);", bytes(a, sizeof a, r->limit), r->memory_fraction);
  if (r->device_known && compact)
    add(&m, " device free %s of %s;", bytes(a, sizeof a, r->device_free),
        bytes(b, sizeof b, r->device_total));
  else if (r->device_known)
    add(&m, " device free %s of %s (%s);", bytes(a, sizeof a, r->device_free),
        bytes(b, sizeof b, r->device_total), r->device_source);
  else
    add(&m, " device free unknown%s;", compact ? "" : " (no reading without a device call)");
  if (r->other_known && compact)
    add(&m, " other CUDA allocations %s.", bytes(a, sizeof a, r->other_bytes));
  else if (r->other_known)
    add(&m, " other CUDA allocations %s (%s).", bytes(a, sizeof a, r->other_bytes),
        r->other_source);
  else
    add(&m, " other CUDA allocations unknown%s.", compact ? "" : " (no CUPTI)");
  add(&m,
      " Free in the pool %s in %" PRIu64 " blocks, largest %s (external fragmentation %.0f%%), "
      "inactive split %s.",
      bytes(a, sizeof a, e->free_in_pool), e->free_blocks, bytes(b, sizeof b, e->largest_free),
      e->external_fragmentation * 100.0, bytes(c, sizeof c, e->inactive_split_bytes));
  add_unusable(&m, r);
  add_cause(&m, r);
  if (!e->larger_than_device && !(e->segment_larger_than_device && r->cap.expandable))
    add_remedies(&m, r);
  m.keep = 0;
  if (m.len && r->message[m.len - 1] == ';') /* the last remedy ends the sentence */
    r->message[m.len - 1] = '.';
  int cut = m.cut;
  m.cut = 0;
  if (cut)
    add(&m, "%s", cut_mark);
  add(&m, "%s", link);
  return cut;
}

/* The message reads the same in every locale ("20.00 MiB", as PyTorch's).
 * Where the whole explanation does not fit OOM_MESSAGE_MAX, it is written
 * without its parenthetical details, and where that does not fit either,
 * as many clauses of it as fit. */
static void write_message(pool_oom_report *r) {
  locale_t old = c_numeric_enter();
  r->message_cut = write_message_text(r, 0);
  if (r->message_cut)
    r->message_cut = write_message_text(r, 1);
  c_numeric_leave(old);
}

void pool_oom_explain(pool_oom_report *r) {
  uint64_t limit = r->ex.split_limit_mb;
  memset(&r->ex, 0, sizeof r->ex);
  r->ex.split_limit_mb = limit;
  compute(r);
  write_message(r);
}

void pool_oom_deliver(void) {
  pool_oom_report *r = pending;
  pending = NULL;
  if (!r)
    return;
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&observer_lock);
  pool_oom_observer o = observer;
  int have = atomic_load(&observer_set) && o.deliver;
  r->observed = 0; /* annotate says whether the observer serves it */
  if (have && o.annotate)
    o.annotate(r, o.arg);
  pool_oom_explain(r);
  pool_fail(GPUPOOL_ERR_OOM, "%s", r->message);
  if (have)
    o.deliver(r, o.arg);
  else
    pool_oom_report_free(r);
  pthread_mutex_unlock(&observer_lock);
}
