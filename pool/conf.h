/* A pool's configuration: defaults, then gpupool_options, then its tunables
 * string, then GPUPOOL_CONF; later wins. */
#ifndef GPUPOOL_CONF_H
#define GPUPOOL_CONF_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool/gpupool.h"

#define MiB ((size_t)1 << 20)

typedef struct pool_config {
  char name[128];
  int device;
  gpupool_backend backend; /* DEFAULT is resolved at create time */
  gpupool_strategy strategy;
  size_t host_capacity;
  size_t max_split_size; /* SIZE_MAX: no limit */
  size_t max_non_split_rounding;
  unsigned roundup_power2_divisions; /* 0 or 1: off */
  double gc_threshold;               /* fraction of device memory; 0: off */
  double reserve_percent;            /* 0: off */
  unsigned round_linear_cutoff;      /* log2 bytes */
  int expandable;                    /* expandable_segments: large segments on vmm pages */
  double expandable_slack;           /* expandable_slack_percent / 100 */
  unsigned expandable_growth_moves;  /* pages moved per page added to the slack; 0: never */
  unsigned fault_every_n;
  double fault_rate;
  uint64_t fault_seed;
} pool_config;

/* GPUPOOL_ERR_INVALID with gpupool_last_error() set on a bad option. */
gpupool_status pool_config_build(const gpupool_options *opt, pool_config *out);

#endif
