/* What the agent's /advice needs beyond the public API: a history built
 * from event rings it took from a pool (under the registry lock, where only
 * copies are allowed) once it has let go of the pool, and the GPUPOOL_CONF
 * line of a live pool's configuration. */
#ifndef GPUPOOL_ADVISOR_LIVE_H
#define GPUPOOL_ADVISOR_LIVE_H

#include <stddef.h>

#include "gpupool/advisor.h"
#include "pool/event_ring.h"

/* Reads and unrefs the n rings (one pool's), each to its end in ends
 * (pool_event_rings_at; every free up to then included). */
gpupool_status history_from_rings(event_ring **rings, const event_ring_end *ends, size_t n,
                                  const char *name, gpupool_history **out);
/* The settings of p that the advisor varies, as a GPUPOOL_CONF line. */
void advisor_conf_of_pool(const gpupool *p, char *out, size_t len);

#endif
