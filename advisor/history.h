/* An allocation history, as the advisor replays it: operations in order on
 * numbered allocations ("slots"), with the requested size and stream of
 * each. Readers (GPUPOOL_RECORD files, /trace documents, PyTorch snapshots,
 * the live event rings) build one through the hist_* calls, which map the
 * recorded addresses or ids to slots; a replay then needs no lookup. */
#ifndef GPUPOOL_ADVISOR_HISTORY_H
#define GPUPOOL_ADVISOR_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool/advisor.h"
#include "pool/types.h"

enum { HOP_ALLOC = 0, HOP_FREE, HOP_RECORD_STREAM, HOP_EMPTY_CACHE };

typedef struct hist_op {
  uint32_t slot;   /* HOP_EMPTY_CACHE: unused */
  uint16_t stream; /* HOP_ALLOC, HOP_RECORD_STREAM: index into streams */
  uint8_t kind;
  uint8_t pad;
} hist_op;

#define HIST_MAX_STREAMS SHARD_TABLE /* as many as a pool keeps */

struct gpupool_history {
  hist_op *ops;
  size_t n_ops, cap_ops;
  uint64_t *size; /* requested bytes per slot */
  size_t n_slots, cap_slots;
  uint64_t streams[HIST_MAX_STREAMS]; /* distinct stream values */
  unsigned n_streams;
  gpupool_history_info info;
  /* While building: live id -> slot (open addressing; id 0 is a valid id) */
  uint64_t *map_key;
  uint32_t *map_slot; /* UINT32_MAX: empty, UINT32_MAX - 1: deleted */
  size_t map_cap, map_used;
  uint64_t live_bytes;
  double t_first, t_last;
  int has_time;
};

gpupool_history *hist_new(const char *source, const char *format);
/* How the hist_* calls fail: the host is out of memory, or the input is
 * malformed or more than a history holds (err, where the call takes one,
 * says how). */
enum { HIST_HOST_OOM = -1, HIST_REFUSED = -2 };
/* The status of failure r: GPUPOOL_ERR_HOST_OOM or GPUPOOL_ERR_INVALID. */
gpupool_status hist_status(int r);
/* 0 on success; HIST_REFUSED: the id is live already, size is above
 * GPUPOOL_MAX_REQUEST, or too many allocations or streams; HIST_HOST_OOM.
 * err says which. */
int hist_alloc(gpupool_history *h, uint64_t id, uint64_t size, uint64_t stream, char *err,
               size_t errlen);
/* 0: freed; 1: the id was not live (counted in info.unmatched_frees,
 * skipped); HIST_HOST_OOM. */
int hist_free(gpupool_history *h, uint64_t id);
/* 0; 1: the id was not live (counted in info.unmatched_record_streams,
 * skipped); HIST_REFUSED: too many streams; HIST_HOST_OOM. err says which. */
int hist_record_stream(gpupool_history *h, uint64_t id, uint64_t stream, char *err, size_t errlen);
/* 0; HIST_HOST_OOM. */
int hist_empty_cache(gpupool_history *h);
int hist_is_live(gpupool_history *h, uint64_t id);
/* A time stamp of an event in seconds (any origin), for info.duration_s. */
void hist_note_time(gpupool_history *h, double t);
/* Ends the build: frees the map, fills info. */
void hist_finish(gpupool_history *h);
/* The stream value record_stream uses for a free that waited on events of
 * streams the source does not name (a deferred free in the event rings, a
 * late free_completed in a PyTorch snapshot): under the simulated device
 * every event completes at once, so which stream does not matter. */
#define HIST_OTHER_STREAM ((uint64_t)0x6f746865727374ULL)

#endif
