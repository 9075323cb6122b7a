/* gpupool: a fast caching device-memory pool.
 *
 * Every function is thread-safe. No function aborts: failures come back as a
 * gpupool_status, and gpupool_last_error() says why in one line. */
#ifndef GPUPOOL_GPUPOOL_H
#define GPUPOOL_GPUPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GPUPOOL_VERSION "0.1.0"

typedef struct gpupool gpupool;

/* One status per kind of failure, the same in every function. A call that
 * fails changes nothing unless its comment says otherwise, but for the
 * handle it was to create: gpupool_create, gpupool_share_export and
 * gpupool_share_import set theirs to NULL once their out-pointer is given
 * (so a failure never leaves a stale handle; gpupool_malloc leaves *ptr). */
typedef enum {
  GPUPOOL_OK = 0,
  /* The device (or simulated device) is out of memory, after the pool
   * returned its cached memory and retried (counted in num_ooms). Also an
   * expandable pool that cannot reserve a stream's address range, the
   * process's virtual address space spent (each range is as large as the
   * device): its gpupool_last_error() says so, and it is no device OOM, not
   * counted in num_ooms and without an OOM report (docs/pool.md). */
  GPUPOOL_ERR_OOM,
  /* A bad argument or configuration: size 0, a foreign pointer, a double
   * free, an unknown key or a bad value, a call in the wrong state. */
  GPUPOOL_ERR_INVALID,
  /* The CUDA runtime, the host backend or the system (a file, a socket, a
   * thread) failed. */
  GPUPOOL_ERR_BACKEND,
  /* Not built in, or not available on this machine. */
  GPUPOOL_ERR_UNSUPPORTED,
  /* The process is out of host memory (malloc failed). Never treated as
   * device out-of-memory: no retry, not counted in num_ooms. */
  GPUPOOL_ERR_HOST_OOM,
} gpupool_status;

typedef enum {
  GPUPOOL_BACKEND_DEFAULT = 0, /* cuda where a GPU is present, else host */
  GPUPOOL_BACKEND_CUDA,        /* cudaMalloc / cudaFree */
  GPUPOOL_BACKEND_CUDA_ASYNC,  /* cudaMallocAsync / cudaFreeAsync on a pool of its own */
  GPUPOOL_BACKEND_HOST,        /* simulated device in host memory (CI, demos, tests) */
  GPUPOOL_BACKEND_SIM,         /* replays only (the advisor): a device of host_capacity bytes
                                  with no memory behind it; its pointers must never be
                                  dereferenced, its pools are invisible to the agent */
} gpupool_backend;

typedef enum {
  GPUPOOL_STRATEGY_DEFAULT = 0, /* bfc */
  GPUPOOL_STRATEGY_BFC,         /* PyTorch-style best fit with split and coalesce */
  GPUPOOL_STRATEGY_ROUND,       /* MXNet Round: power-of-two buckets, no split */
  GPUPOOL_STRATEGY_NAIVE,       /* MXNet Naive: page-rounded exact-size buckets */
} gpupool_strategy;

/* Zero-initialise, then set what you need: every zero field means "default".
 * GPUPOOL_CONF (same keys as `tunables`) is applied after these fields, so a
 * user can retune a program without recompiling; set ignore_env to prevent it. */
typedef struct gpupool_options {
  /* The `pool` metrics label; NULL = "default". UTF-8 text without control
   * characters, 1 to 127 bytes: any other name is GPUPOOL_ERR_INVALID. */
  const char *name;
  int device;              /* CUDA device ordinal */
  gpupool_backend backend; /* default: cuda where a GPU is present, else host */
  gpupool_strategy strategy;
  const char *tunables; /* "key:value,key:value", the GPUPOOL_CONF grammar */
  size_t host_capacity; /* host backend: simulated device size in bytes (0: 8 GiB; at most
                           1 PiB, as host_capacity_mb) */
  int ignore_env;       /* nonzero: do not read GPUPOOL_CONF */
} gpupool_options;

/* One statistic in the style of torch.cuda.memory_stats. */
typedef struct gpupool_stat {
  int64_t current;
  int64_t peak;
  int64_t allocated; /* accumulated increments since creation or reset */
  int64_t freed;     /* accumulated decrements since creation or reset */
} gpupool_stat;

enum {
  GPUPOOL_STAT_ALL = 0,
  GPUPOOL_STAT_SMALL = 1,
  GPUPOOL_STAT_LARGE = 2,
  GPUPOOL_STAT_TYPES = 3
};

/* Index each array with GPUPOOL_STAT_ALL / _SMALL / _LARGE. */
typedef struct gpupool_stats {
  gpupool_stat allocation[GPUPOOL_STAT_TYPES];     /* live allocations */
  gpupool_stat segment[GPUPOOL_STAT_TYPES];        /* device allocations held */
  gpupool_stat active[GPUPOOL_STAT_TYPES];         /* allocated, or freed and pending release */
  gpupool_stat inactive_split[GPUPOOL_STAT_TYPES]; /* free blocks inside split segments */
  gpupool_stat allocated_bytes[GPUPOOL_STAT_TYPES];
  gpupool_stat reserved_bytes[GPUPOOL_STAT_TYPES];
  gpupool_stat active_bytes[GPUPOOL_STAT_TYPES];
  gpupool_stat inactive_split_bytes[GPUPOOL_STAT_TYPES];
  gpupool_stat requested_bytes[GPUPOOL_STAT_TYPES];
  uint64_t num_alloc_retries;   /* device allocation retried after freeing cache */
  uint64_t num_ooms;            /* allocations that failed for want of device memory */
  uint64_t num_device_alloc;    /* segments allocated from the device (pages: expandable) */
  uint64_t num_device_free;     /* segments returned to the device (pages: expandable) */
  uint64_t num_cache_hits;      /* allocations served without a device call */
  uint64_t num_device_sourced;  /* allocations that needed a new segment */
  uint64_t num_frees;           /* successful gpupool_free calls, counted when made (also
                                   those deferred by record_stream or an export) */
  uint64_t num_gc_runs;         /* garbage_collection_threshold passes */
  uint64_t num_sync_events;     /* cross-stream events recorded by record_stream frees */
  uint64_t largest_free_block;  /* largest cached block, bytes (expandable: over mapped pages) */
  uint64_t free_blocks;         /* cached (free) blocks */
  uint64_t pending_free_blocks; /* freed, waiting on other streams' events or an export's end */
  /* expandable_segments: idle pages moved to back another block, and the
   * device synchronizations made before unmapping pages (work queued before
   * a free may still use its memory). */
  uint64_t num_pages_moved;
  uint64_t num_device_syncs;
  /* expandable_segments: pages unmapped while allocating (an old mapping
   * under the new block, or a moved page's that could not stay); a move's
   * old mapping otherwise stays until a block is placed over it or idle pages
   * are released. */
  uint64_t num_alloc_unmaps;
} gpupool_stats;

gpupool_status gpupool_create(const gpupool_options *opt, gpupool **out);
/* Checks conf, a GPUPOOL_CONF string, as gpupool_create(opt) would read it
 * from GPUPOOL_CONF (opt NULL: every default; opt->ignore_env is not looked
 * at), without creating anything: no device is touched, no memory taken, no
 * environment read. GPUPOOL_OK, or GPUPOOL_ERR_INVALID with the reason
 * gpupool_create would give in gpupool_last_error() ("GPUPOOL_CONF: strategy:
 * unknown value 'nope' ...", or a combination it refuses, such as
 * expandable_segments with strategy round), or GPUPOOL_ERR_UNSUPPORTED, as
 * gpupool_create, for expandable_segments with backend cuda_async. NULL or ""
 * is valid. What only the machine can tell is left to gpupool_create: whether
 * the backend starts, and a fault_* key when neither opt nor conf names the
 * backend (the default is cuda where a GPU is present). */
gpupool_status gpupool_conf_check(const gpupool_options *opt, const char *conf);
/* A pool serves the process that created it. In a child forked after its
 * creation, every call that would take its locks (malloc, free,
 * record_stream, stats, empty_cache, ...) returns GPUPOOL_ERR_UNSUPPORTED
 * (get_tag_stats -1, empty_cache 0) with the reason, and gpupool_destroy
 * releases nothing: the parent's locks may be held by a thread the child
 * does not have, and its device memory is not the child's. docs/pool.md,
 * "fork()". */
void gpupool_destroy(gpupool *p);

/* The largest request a pool accepts (256 TiB, beyond any device). */
#define GPUPOOL_MAX_REQUEST ((size_t)1 << 48)

/* 0 < size <= GPUPOOL_MAX_REQUEST (else GPUPOOL_ERR_INVALID); stream is a
 * cudaStream_t (NULL = legacy default stream). A pool serves at most 1024
 * distinct streams over its lifetime: a 1025th is GPUPOOL_ERR_UNSUPPORTED. */
gpupool_status gpupool_malloc(gpupool *p, void **ptr, size_t size, void *stream);
gpupool_status gpupool_free(gpupool *p, void *ptr);
/* Mark ptr as used on another stream: its reuse waits for that stream's work.
 * A block is used on at most 255 streams besides its own: another is
 * GPUPOOL_ERR_UNSUPPORTED (host memory running out, GPUPOOL_ERR_HOST_OOM). */
gpupool_status gpupool_record_stream(gpupool *p, void *ptr, void *stream);
/* Return every cached segment that holds no live block to the device;
 * returns the bytes released. Unlike PyTorch's empty_cache it does not wait
 * for other streams: a block freed after record_stream whose streams have not
 * finished stays until a later call finds them done. With p NULL it does
 * nothing and returns 0; having no status, it sets gpupool_last_error(). */
size_t gpupool_empty_cache(gpupool *p);
gpupool_status gpupool_get_stats(gpupool *p, gpupool_stats *out);
/* PyTorch's per-process memory fraction (torch.cuda.set_per_process_memory_
 * fraction), for one pool: its reserved bytes stay within fraction x the
 * device's memory. An allocation that would pass the cap first waits for the
 * device and returns the cached segments (the OOM retry), then fails with
 * GPUPOOL_ERR_OOM, its message and OOM report naming the cap; idle pages of
 * an expandable pool are moved rather than new ones made past it. A cap
 * below what the pool holds releases nothing: cached blocks still serve,
 * only growth is refused. The config key memory_fraction sets it at
 * creation. 0 <= fraction <= 1, else GPUPOOL_ERR_INVALID and nothing
 * changes. */
gpupool_status gpupool_set_memory_fraction(gpupool *p, double fraction);
/* The fraction set, 1.0 when none was (as PyTorch answers); NaN with p NULL
 * (gpupool_last_error() says so). */
double gpupool_memory_fraction(const gpupool *p);
/* The max_split_size_mb the pool runs with, in bytes (as
 * torch.cuda.memory_stats' "max_split_size"), SIZE_MAX when unlimited; 0
 * with p NULL (gpupool_last_error() says so). Fixed at creation. */
size_t gpupool_max_split_size(const gpupool *p);
/* The free and total memory of the pool's device, as torch.cuda.mem_get_info
 * answers: a device call (cudaMemGetInfo) on the cuda backends, the
 * simulated device's accounting on host. Takes none of the pool's locks. */
gpupool_status gpupool_mem_get_info(gpupool *p, size_t *free_bytes, size_t *total_bytes);
/* peak = current for every stat. With p NULL: nothing, and
 * gpupool_last_error() says so (no status to return). */
void gpupool_reset_peak_stats(gpupool *p);
/* allocated/freed accumulations and the counters to zero (the agent's
 * allocation-size histogram and device-call times too, which count the same
 * events). With p NULL: nothing, and gpupool_last_error() says so (no status
 * to return). */
void gpupool_reset_accumulated_stats(gpupool *p);

const char *gpupool_status_string(gpupool_status s);
/* The reason for the last failure on this thread ("" if none). As errno, a
 * call that succeeds leaves it as it was, also when it recovered on its way
 * from a failure of its own (a device allocation retried after emptying the
 * cache, a replay's OOMs): only a failure the caller sees sets it. */
const char *gpupool_last_error(void);

const char *gpupool_name(const gpupool *p);
int gpupool_device(const gpupool *p);
const char *gpupool_backend_name(const gpupool *p);
const char *gpupool_strategy_name(const gpupool *p);

#ifdef __cplusplus
}
#endif
#endif
