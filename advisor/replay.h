/* The replay engine (gpupool_replay in include/gpupool/advisor.h), with the
 * option the capacity search needs: stop at the first OOM. */
#ifndef GPUPOOL_ADVISOR_REPLAY_H
#define GPUPOOL_ADVISOR_REPLAY_H

#include "history.h"

/* Checks conf, read with the pool's own parser (core/kvconf.h), for keys a
 * replay must not take (backend, device, capacity, faults, name) and for a
 * malformed string; 0, or -1 with err set. */
int replay_conf_check(const char *conf, char *err, size_t errlen);
/* The largest simulated device, 1 PiB (host_capacity_mb's most): the sim
 * backend's address space holds the ranges of every stream a pool can
 * serve on it (pool/backend_sim.c), and an answer of the capacity search
 * stays far from UINT64_MAX ("does not fit"). */
#define REPLAY_MAX_CAPACITY ((uint64_t)1 << 50)
/* GPUPOOL_ERR_INVALID for a capacity of 0 or above REPLAY_MAX_CAPACITY. */
gpupool_status replay_run(const gpupool_history *h, const char *conf, uint64_t capacity,
                          int stop_at_oom, gpupool_replay_result *out);

#endif
