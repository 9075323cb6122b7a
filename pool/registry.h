/* The process-wide registry of live pools: pools join in gpupool_create and
 * leave in gpupool_destroy, so the agent sees pools made before or after it
 * starts. */
#ifndef GPUPOOL_REGISTRY_H
#define GPUPOOL_REGISTRY_H

#include "gpupool/gpupool.h"

void registry_add(gpupool *p);
void registry_remove(gpupool *p);

/* Calls fn for each live pool, in creation order, under the registry lock:
 * no pool can be destroyed while fn runs. fn must only copy (stats, rings),
 * never block on I/O. Returns the number of pools visited. */
int registry_foreach(void (*fn)(gpupool *p, void *arg), void *arg);
/* registry_foreach, then done(arg) still under the registry lock (so that
 * what fn held of each pool is let go before any pool can be destroyed). */
int registry_foreach_then(void (*fn)(gpupool *p, void *arg), void (*done)(void *arg), void *arg);

/* Hook the agent sets to hear of segment changes (wakes its sampler). Called
 * on the pool's slow path, outside pool locks. NULL to clear. */
void registry_set_segment_listener(void (*fn)(gpupool *p));
void registry_notify_segment_change(gpupool *p);

#endif
