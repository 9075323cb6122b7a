/* gpupool advisor: replays a job's allocation history against candidate pool
 * configurations on a simulated device (no device memory is used, so an
 * 80 GiB device simulates anywhere) and recommends the configuration with
 * the lowest peak reserved memory whose added device-call time stays within
 * a bound, plus the smallest device on which the history runs without an
 * OOM. docs/advisor.md describes the inputs, the figures and the prices.
 *
 * Functions return a gpupool_status; gpupool_last_error() says why in one
 * line (for a malformed input: the path and the line or byte offset). */
#ifndef GPUPOOL_ADVISOR_H
#define GPUPOOL_ADVISOR_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpupool_history gpupool_history;

typedef struct gpupool_history_info {
  char source[256]; /* the path, or "pool NAME" */
  char format[16];  /* "record", "trace", "torch", "live" */
  uint64_t events;  /* operations replayed: allocations, frees, record_stream, empty_cache */
  uint64_t allocations, frees, record_streams, empty_caches;
  uint64_t unmatched_frees;          /* frees of no live allocation (one older than the history,
                                        or freed already): skipped */
  uint64_t unmatched_record_streams; /* record_streams of no live allocation: skipped */
  uint64_t live_at_end;              /* allocations never freed */
  uint64_t dropped;                  /* events the source had lost (overwritten ring slots) */
  uint64_t streams;
  uint64_t peak_requested;  /* the most requested bytes live at once */
  uint64_t requested_bytes; /* summed over all allocations */
  uint64_t largest_request;
  double duration_s; /* first to last event, where the source has times; else 0 */
} gpupool_history_info;

/* format: NULL or "auto" (by content), "record" (GPUPOOL_RECORD files),
 * "trace" (a /trace document), "torch" (torch.cuda.memory._dump_snapshot()).
 * Any of them may be gzip'd (one member or several): it is inflated as it is
 * read (with zlib; a build without it reads plain files only), and a member
 * cut short or corrupt is malformed input, whatever the bytes before it
 * held. A UTF-8 byte-order mark that begins a text input (a trace, a record
 * file) is skipped; one anywhere else, or a broken one, is malformed input.
 * pool: for inputs with several pools or devices, which one (a trace pool
 * name, a snapshot's or a record file's device ordinal); NULL: the busiest.
 * A path
 * that cannot be opened or read, a malformed document, one without a
 * single allocation and one of more streams than a pool serves (1024) are
 * GPUPOOL_ERR_INVALID (the caller's input); the host out of memory for the
 * history (the document as it is parsed, its events, its map of live
 * allocations) is GPUPOOL_ERR_HOST_OOM. */
gpupool_status gpupool_history_load(const char *path, const char *format, const char *pool,
                                    gpupool_history **out);
/* The events pool p's rings hold (the agent records them while it runs;
 * without it, an empty history, whose replays give zeros). Statuses as
 * gpupool_history_load's. */
gpupool_status gpupool_history_from_pool(gpupool *p, gpupool_history **out);
void gpupool_history_free(gpupool_history *h);
const gpupool_history_info *gpupool_history_get_info(const gpupool_history *h);

typedef struct gpupool_replay_result {
  uint64_t peak_reserved, peak_allocated, peak_requested; /* bytes */
  double ratio;                                           /* peak reserved / peak allocated */
  uint64_t device_allocs, device_frees; /* segments, or pages with expandable segments */
  uint64_t cache_flushes; /* retries after freeing the cache, GC passes, empty_cache */
  uint64_t alloc_retries, gc_runs, ooms;
  double fragmentation_at_peak;       /* 1 - largest free block / (reserved - allocated) there */
  uint64_t pages_moved, device_syncs; /* expandable segments; syncs include OOM retries */
  uint64_t sync_events;               /* events recorded for record_stream frees */
  int expandable;
  uint64_t events;    /* operations replayed (fewer when stopped at the first OOM) */
  double seconds;     /* wall time of the replay */
  double cpu_seconds; /* CPU time of the replaying thread */
} gpupool_replay_result;

/* Replays h on a simulated device of capacity bytes (1 to 2^50, 1 PiB) under
 * conf (the GPUPOOL_CONF grammar; NULL or "" is the default bfc; keys that
 * choose a backend, device, capacity, name or fault injection are refused,
 * however they are spelt: the keys are read as the pool reads them, white
 * space around them trimmed). The OOMs of the replay are its result
 * (out->ooms): a replay that runs leaves gpupool_last_error() as it was. */
gpupool_status gpupool_replay(const gpupool_history *h, const char *conf, uint64_t capacity,
                              gpupool_replay_result *out);

/* Prices of device calls in microseconds (docs/advisor.md gives the measured
 * defaults, chosen where a field is 0). Each is 0 or a price up to 1e9 us;
 * a negative, NaN or infinite one is GPUPOOL_ERR_INVALID. */
typedef struct gpupool_advice_prices {
  double malloc_us, free_us; /* cudaMalloc, cudaFree of a segment */
  double page_map_us;        /* cuMemCreate + cuMemMap + cuMemSetAccess of a page */
  double page_unmap_us;      /* cuMemUnmap + cuMemRelease of a page */
  double page_move_us;       /* an idle page unmapped and mapped elsewhere */
  double sync_us;            /* cudaDeviceSynchronize */
} gpupool_advice_prices;

/* Out of the ranges given here, gpupool_advise returns GPUPOOL_ERR_INVALID. */
typedef struct gpupool_advice_options {
  uint64_t capacity;        /* simulated device bytes; 0: 80 GiB; else from capacity_step
                               to 1 PiB (2^50), rounded down to a multiple of the step */
  uint64_t capacity_step;   /* granularity of the smallest-capacity search; 0: 2 MiB; else
                               a whole number of MiB up to the capacity */
  double max_added_ms;      /* device-call time allowed above the current config's;
                               < 0 or NaN: the default (docs/advisor.md); not infinite */
  const char *current;      /* the configuration in use (NULL: default bfc) */
  const char *const *extra; /* more configurations to try */
  size_t n_extra;
  int no_defaults;   /* nonzero: only current and extra */
  int no_capacity;   /* nonzero: skip the smallest-capacity search */
  unsigned threads;  /* workers; 0: one per online core; at most 64 are started */
  double deadline_s; /* stop starting replays after this much wall time; 0 (or
                        infinite): none; not negative or NaN */
  gpupool_advice_prices prices;
} gpupool_advice_options;

typedef struct gpupool_advice_candidate {
  char conf[256];       /* GPUPOOL_CONF line ("" = defaults) */
  char torch_conf[256]; /* PYTORCH_CUDA_ALLOC_CONF line, in the spelling PyTorch's parser
                           takes ("": its defaults); "" when has_torch is 0 */
  int has_torch;        /* 1: torch_conf is the equivalent PyTorch setting; 0: PyTorch has
                           no such setting (docs/advisor.md) */
  int done;             /* 0: not replayed (the deadline came first) */
  gpupool_replay_result r;
  double device_ms; /* predicted time in device calls */
  double added_ms;  /* device_ms - the current config's */
} gpupool_advice_candidate;

typedef struct gpupool_advice {
  gpupool_history_info input;
  gpupool_advice_candidate *c;
  size_t n;
  size_t current;     /* index of the current configuration */
  size_t recommended; /* index of the recommendation: the current configuration's
                         when no other qualifies; none at all when c[recommended] was
                         not replayed (the deadline came first) or ran out of memory */
  uint64_t capacity, capacity_step;
  double max_added_ms;
  gpupool_advice_prices prices;
  /* Smallest simulated capacity (a multiple of capacity_step) without an OOM;
   * 0: not searched, UINT64_MAX: none up to capacity. */
  uint64_t min_capacity_current, min_capacity_recommended;
  double wall_s;
  unsigned threads;
  int truncated; /* the deadline stopped the search early */
} gpupool_advice;

/* opt NULL: every default. GPUPOOL_ERR_INVALID for a bad configuration in
 * current or extra, extra NULL with n_extra above 0, or an option out of
 * its range (above). */
gpupool_status gpupool_advise(const gpupool_history *h, const gpupool_advice_options *opt,
                              gpupool_advice **out);
void gpupool_advice_free(gpupool_advice *a);
/* format "table" (for people), "json" or "csv". A malloc'd string (free()),
 * or NULL when out of memory or format is unknown. The JSON and the CSV give
 * sizes as exact byte counts; the table never rounds a size that is not a
 * whole number of its unit (MiB, GiB) to look like one. */
char *gpupool_advice_render(const gpupool_advice *a, const char *format);

#ifdef __cplusplus
}
#endif
#endif
