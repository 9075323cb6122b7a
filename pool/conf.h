/* A pool's configuration: defaults, then gpupool_options, then its tunables
 * string, then GPUPOOL_CONF; later wins. */
#ifndef GPUPOOL_CONF_H
#define GPUPOOL_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool/gpupool.h"
#include "types.h"

/* GPUPOOL_ERR_INVALID with gpupool_last_error() set on a bad option. */
gpupool_status pool_config_build(const gpupool_options *opt, pool_config *out);

/* The combinations of settings a pool refuses whatever the machine
 * (expandable_segments with a strategy other than bfc; a fault_* key with a
 * backend other than host, checked once c->backend is not the default):
 * GPUPOOL_OK, or GPUPOOL_ERR_INVALID with gpupool_last_error() set. */
gpupool_status pool_config_check(const pool_config *c);

#endif
