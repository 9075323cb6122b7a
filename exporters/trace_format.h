/* How recorded events become Chrome Trace Event Format JSON, and the track
 * layout (docs/trace.md explains it to users):
 *   pid  = CUDA device ordinal + 1, one "process" per device ("GPU 0"...);
 *          TRACE_HOST_PID for CUPTI records that belong to no device;
 *   tid  = TRACE_POOL_TID_BASE + 2 * pool id: the pool's track (allocations,
 *          frees, instants, counters), + 1: its device calls (segment alloc and
 *          free as "X"); TRACE_CUPTI_TID_BASE + pid: CUDA allocations seen by
 *          CUPTI. Thread ids never equal a pid: Perfetto treats tid == pid as
 *          the process's main thread. Process metadata uses tid = pid;
 *   counters "<label> memory" and "<label> allocations" per pool;
 *   ts   = microseconds (3 decimals: nanoseconds) since base_ns. */
#ifndef GPUPOOL_TRACE_FORMAT_H
#define GPUPOOL_TRACE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "json_stream.h"
#include "trace_samples.h"
#include "trace_live_set.h"
#include "trace_merge.h"

#define TRACE_HOST_PID       65536
#define TRACE_POOL_TID_BASE  1000000
#define TRACE_CUPTI_TID_BASE 500000

/* A pool's track label: "pool ", its label, " (gone, id 4294967295)". */
#define TRACE_TRACK_LABEL_MAX (TRACE_LABEL_MAX + 32)
/* A track or event name built from a track label and a few words. */
#define TRACE_TRACK_NAME_MAX (TRACE_TRACK_LABEL_MAX + 64)

typedef struct trace_pool {
  trace_pool_info info;
  /* the pool's label as /metrics writes it (a gone pool's at its last
   * sample): its caller's to give */
  char metrics_label[TRACE_LABEL_MAX];
  char label[TRACE_TRACK_LABEL_MAX]; /* its tracks': trace_format_label_pools */
  int live;
  int have_requested;    /* a regular counter sample was written */
  uint64_t requested;    /* the latest sample's, moved by the allocs and frees since */
  uint64_t calls_end_ns; /* end of the last device call drawn on its track */
} trace_pool;

typedef struct trace_format {
  json_buf *out;
  trace_pool *pools; /* sorted by id */
  size_t npools;
  uint64_t base_ns;
  uint64_t written; /* JSON events written */
  trace_live_set live;
  unsigned char *pid_named; /* CUPTI tracks: bit 0 process name, bit 1 thread name */
} trace_format;

/* pools must stay valid while f is used. 0 on success, -1 on allocation
 * failure. */
int trace_format_init(trace_format *f, json_buf *out, trace_pool *pools, size_t npools,
                      uint64_t base_ns);
void trace_format_free(trace_format *f);

/* Gives each pool its track label, "pool <metrics_label>". Live pools'
 * labels are distinct per device; a gone pool's may be a live one's now
 * (pools of one name are numbered anew as they go), and tracks are grouped
 * per device: a gone pool whose label another pool of its device has gets
 * " (gone, id <id>)" added, and a live one whose label another live pool of
 * its device has (never, from the registry) " (id <id>)". */
void trace_format_label_pools(trace_pool *pools, size_t npools);
/* The pool with this id, or NULL. */
trace_pool *trace_format_find_pool(const trace_format *f, uint32_t id);

/* process_name / thread_name / sort-index metadata of every pool's tracks. */
void trace_format_metadata(trace_format *f, uint64_t ts_ns);
/* The JSON events of one record (zero, one or a few). */
void trace_format_record(trace_format *f, const trace_record *r);

int trace_pid_of_device(int64_t device);

#endif
