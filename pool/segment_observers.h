/* Segment observers: code above the pool (the agent's CUPTI side) that must
 * know where the pool's segments lie registers here; the pool reports each
 * segment it gains or loses. With no observer registered a report is one
 * atomic load: no lock is taken and nothing is called. */
#ifndef GPUPOOL_SEGMENT_OBSERVERS_H
#define GPUPOOL_SEGMENT_OBSERVERS_H

#include <stdint.h>

#include "gpupool/gpupool.h"

typedef struct segment_change {
  uint64_t addr, size; /* the segment's address range (a vmm segment's whole range) */
  int device;          /* the pool's device ordinal */
  int alive;           /* 1: became a segment of a pool; 0: stops being one */
  int host_memory;     /* a simulated device (host or sim backend), not device memory */
} segment_change;

/* Called on the pool's slow path with the pool's slow lock held (and no
 * shard lock): it must not call into the pool, and must not block. */
typedef void (*segment_observer)(void *arg, const segment_change *c);

#define SEGMENT_OBSERVERS_MAX 4

/* Registers fn and reports to it, as alive, every segment the live pools
 * hold now (a segment made meanwhile may be reported twice: observers treat
 * a repeated alive report as one). 0, or -1 when SEGMENT_OBSERVERS_MAX are
 * registered already. */
int segment_observers_add(segment_observer fn, void *arg);
/* Unregisters fn; once it returns, fn is not running and is not called. */
void segment_observers_remove(segment_observer fn, void *arg);

/* The pool's report (slow path, slow lock held). */
void segment_observers_note(gpupool *p, uintptr_t addr, size_t size, int alive);

#endif
