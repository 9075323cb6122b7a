/* The OOM flight recorder's pool half. At the pool's final failure (after
 * its flush and retry) reclaim.c captures, under the slow lock and without a
 * device call, the request, the pool's segments, blocks, statistics and last
 * events, and what the pool knows of the device; once the slow lock is
 * released (pool.c) the report is delivered: an observer, when one is set
 * (the agent), annotates it with what only it knows (CUPTI's other bytes,
 * its sampler's device reading), the explanation is computed, written to
 * gpupool_last_error(), and the report handed to the observer. The pool
 * knows nothing of the agent: the observer is declared here. */
#ifndef GPUPOOL_OOM_REPORT_H
#define GPUPOOL_OOM_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "core/errors.h"
#include "gpupool/gpupool.h"
#include "pool_capture.h"

/* What one report copies of its pool (whole segments, while all of these
 * fit; pool_capture_limits): at most 4096 * 64 + 1024 * 104 + 1024 * 16 +
 * 256 * 64 bytes = 392 KiB (pool_block_info, pool_capture_segment,
 * pool_capture_run, pool_event), and the report's own 3 KiB: docs/oom.md
 * states 395 KiB. */
#define OOM_REPORT_MAX_BLOCKS   4096 /* blocks */
#define OOM_REPORT_MAX_SEGMENTS 1024 /* segments (one block each is common: large tensors) */
#define OOM_REPORT_MAX_RUNS     1024 /* runs of mapped pages of expandable segments */
#define OOM_REPORT_MAX_EVENTS   256  /* last events of the pool */
/* The message is gpupool_last_error()'s text: it must fit its buffer. The
 * longest the explanation can be (a 127-byte pool name, every clause) is
 * longer; the message is then written again without its parenthetical
 * details, and where even that does not fit, cut at a clause boundary with
 * the report link kept (pool_oom_explain). */
#define OOM_MESSAGE_MAX POOL_ERROR_MAX

/* A three-valued answer: computed yes, computed no, or bounds that straddle. */
typedef enum { OOM_NO = 0, OOM_YES = 1, OOM_MAYBE = 2, OOM_NOT_APPLICABLE = 3 } oom_answer;

typedef struct oom_explanation {
  uint64_t need;         /* bytes the device had to give: the new segment, or pages */
  uint64_t free_in_pool; /* reserved - allocated (inactive and pending blocks) */
  uint64_t free_blocks, largest_free;
  double external_fragmentation; /* 1 - largest_free / free_in_pool (0 when nothing is free) */
  uint64_t inactive_split_bytes;
  uint64_t outside_pool; /* device memory not held by this pool (total - free - reserved) */
  int outside_known;
  uint64_t shortfall; /* need - device free (when the device reading is known) */
  /* The reading showed need free: the failure is not explained by the
   * device's free memory as read (a stale reading, or the backend refused
   * for another reason), so the remedies that free memory are answered
   * maybe */
  int device_had_room;
  int larger_than_device; /* the request itself: no setting makes it fit */
  /* The request fits the device, but the block or segment it is rounded to
   * (the strategy's block, a plain segment of 20 MiB or whole 2 MiB pages)
   * does not: expandable_segments:True may serve it (its answer tells), but
   * not in an expandable pool (whose pages are already as small as pages
   * get). */
  int segment_larger_than_device;
  /* The host backend's fault injection (fault_every_n, fault_rate) failed
   * the device allocation on purpose. */
  int injected_fault;
  /* Free blocks the request could not take, and why (pool_capture_totals):
   * the largest it could take; on other streams; in the other size pool of
   * its stream; large enough but refused by the strategy's rules. */
  uint64_t usable_largest;
  uint64_t other_stream_free, other_stream_largest;
  uint64_t other_pool_free, other_pool_largest;
  uint64_t rules_free, rules_largest;
  uint64_t empty_cache_frees;
  oom_answer empty_cache_enough;
  oom_answer expandable;                    /* would expandable_segments:True have served it */
  uint64_t expandable_low, expandable_high; /* bytes the pool would hold with it (bounds) */
  uint64_t expandable_room;                 /* device memory it could have used */
  uint64_t split_limit_mb;                  /* the max_split_size_mb suggested (0: none) */
  uint64_t split_at_most;    /* bytes left in splits with it: free in smaller split segments */
  uint64_t split_unstranded; /* free bytes now inside split segments of that size or more */
  /* bytes others must free for it to fit (0: none needed, or, with
   * outside_not_enough, all they hold would not do) */
  uint64_t free_outside_to_fit;
  int outside_not_enough;
  /* The report's limit_refused: shortfall is then the bytes past the cap,
   * and the memory_fraction that would allow it (0 when the device is
   * too small for any, or its size is unknown). */
  double fraction_needed;
} oom_explanation;

typedef struct pool_oom_report {
  uint64_t id;      /* process-wide, from 1 */
  uint64_t time_ns; /* CLOCK_REALTIME */
  uint64_t size, rounded, segment_size, stream;
  gpupool_stats stats;
  pool_capture cap; /* pool identity, segments, blocks, last events, totals */
  /* The device: the last reading known without a device call. Without one
   * (!device_known), device_total may still hold the device's size, which
   * the pool asks once (0 if it never did). */
  int device_known;
  uint64_t device_free, device_total;
  uint64_t device_age_ns; /* how old that reading is */
  char device_source[96]; /* where it came from, in words */
  /* Memory held by other CUDA allocations on the device (CUPTI owner="other",
   * or the host backend's simulated other allocations). */
  int other_known;
  uint64_t other_bytes;
  char other_source[64];
  /* memory_fraction's cap (has_limit), and whether it, not the device,
   * refused the allocation's last try. */
  int has_limit, limit_refused;
  uint64_t limit;
  double memory_fraction;
  /* The observer will serve the report (annotate sets it: the agent keeps
   * reports and listens): the message names /oom/<id>. */
  int observed;
  /* The last device allocation failed by the host backend's fault
   * injection (its reason, in gpupool_last_error() at the capture, said
   * so). */
  int injected_fault;
  int message_cut; /* the message left clauses out (OOM_MESSAGE_MAX) */
  oom_explanation ex;
  char message[OOM_MESSAGE_MAX]; /* the gpupool_last_error() line */
} pool_oom_report;

typedef struct pool_oom_observer {
  /* Before the explanation: fill device_* (when !device_known) and other_*,
   * and set observed when the observer will serve the report at /oom/<id>
   * (the message then names it). Runs on the failing thread, no pool lock
   * held; must only copy. */
  void (*annotate)(pool_oom_report *r, void *arg);
  /* The finished report; the observer owns it (pool_oom_report_free). */
  void (*deliver)(pool_oom_report *r, void *arg);
  void *arg;
} pool_oom_observer;

/* Sets (a copy of) o, or clears it with NULL. Waits for deliveries in
 * flight, so that after a clear no callback runs. */
void pool_oom_set_observer(const pool_oom_observer *o);

/* reclaim.c, under p's slow lock: records the report of this thread's
 * failing request (kept for pool_oom_deliver). */
void pool_oom_capture(gpupool *p, void *stream, size_t size, size_t rounded, size_t segsize);
/* pool.c, with no pool lock held: completes and delivers the report this
 * thread captured, writing its message to gpupool_last_error(). */
void pool_oom_deliver(void);

/* The explanation and the message of r (exposed for tests). */
void pool_oom_explain(pool_oom_report *r);
void pool_oom_report_free(pool_oom_report *r);

#endif
