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

#endif
