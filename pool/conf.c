#include "conf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "kvconf.h"
#include "pool_name.h"

static void set_defaults(pool_config *c) {
  memset(c, 0, sizeof *c);
  strcpy(c->name, "default");
  c->host_capacity = (size_t)8 << 30;
  c->max_split_size = SIZE_MAX;
  c->max_non_split_rounding = 20 * MiB;
  c->round_linear_cutoff = 24;
  c->fault_seed = 1;
  c->expandable_slack = 0.05;
}

static int set_name(pool_config *c, const char *name, char *err, size_t errlen) {
  _Static_assert(sizeof c->name > POOL_NAME_MAX, "pool_config.name holds the longest name");
  if (pool_name_check(name, err, errlen))
    return -1;
  memcpy(c->name, name, strlen(name) + 1);
  return 0;
}

static int apply_pair(void *ctx, const char *key, const char *v, char *err, size_t errlen) {
  pool_config *c = ctx;
  uint64_t u;
  double d;
  if (strcmp(key, "backend") == 0) {
    if (strcmp(v, "cuda") == 0)
      c->backend = GPUPOOL_BACKEND_CUDA;
    else if (strcmp(v, "cuda_async") == 0)
      c->backend = GPUPOOL_BACKEND_CUDA_ASYNC;
    else if (strcmp(v, "host") == 0)
      c->backend = GPUPOOL_BACKEND_HOST;
    else if (strcmp(v, "sim") == 0)
      c->backend = GPUPOOL_BACKEND_SIM;
    else
      goto bad_choice;
  } else if (strcmp(key, "strategy") == 0) {
    if (strcmp(v, "bfc") == 0)
      c->strategy = GPUPOOL_STRATEGY_BFC;
    else if (strcmp(v, "round") == 0)
      c->strategy = GPUPOOL_STRATEGY_ROUND;
    else if (strcmp(v, "naive") == 0)
      c->strategy = GPUPOOL_STRATEGY_NAIVE;
    else
      goto bad_choice;
  } else if (strcmp(key, "device") == 0) {
    if (kvconf_u64(v, 0, 1023, &u))
      goto bad_value;
    c->device = (int)u;
  } else if (strcmp(key, "name") == 0) {
    return set_name(c, v, err, errlen);
  } else if (strcmp(key, "host_capacity_mb") == 0) {
    if (kvconf_u64(v, 1, (uint64_t)1 << 30, &u))
      goto bad_value;
    c->host_capacity = (size_t)u * MiB;
  } else if (strcmp(key, "max_split_size_mb") == 0) {
    if (strcmp(v, "inf") == 0 || strcmp(v, "unlimited") == 0)
      c->max_split_size = SIZE_MAX;
    else if (kvconf_u64(v, 21, (uint64_t)1 << 30, &u)) /* > 20 MiB, as PyTorch requires */
      goto bad_value;
    else
      c->max_split_size = (size_t)u * MiB;
  } else if (strcmp(key, "max_non_split_rounding_mb") == 0) {
    if (kvconf_u64(v, 0, (uint64_t)1 << 30, &u))
      goto bad_value;
    c->max_non_split_rounding = (size_t)u * MiB;
  } else if (strcmp(key, "roundup_power2_divisions") == 0) {
    if (kvconf_u64(v, 0, 64, &u) || (u > 1 && (u & (u - 1)))) {
      snprintf(err, errlen,
               "roundup_power2_divisions: '%s' is not a power of two from 1 to 64 "
               "(per-interval lists are not supported)",
               v);
      return -1;
    }
    c->roundup_power2_divisions = (unsigned)u;
  } else if (strcmp(key, "garbage_collection_threshold") == 0) {
    if (kvconf_double(v, 0, 1, &d) || d <= 0 || d >= 1) {
      snprintf(err, errlen, "garbage_collection_threshold: '%s' is not between 0 and 1 (exclusive)",
               v);
      return -1;
    }
    c->gc_threshold = d;
  } else if (strcmp(key, "reserve_percent") == 0) {
    if (kvconf_double(v, 0, 50, &d))
      goto bad_value;
    c->reserve_percent = d;
  } else if (strcmp(key, "expandable_segments") == 0) {
    if (strcmp(v, "True") == 0 || strcmp(v, "true") == 0 || strcmp(v, "1") == 0)
      c->expandable = 1;
    else if (strcmp(v, "False") == 0 || strcmp(v, "false") == 0 || strcmp(v, "0") == 0)
      c->expandable = 0;
    else {
      snprintf(err, errlen, "expandable_segments: '%s' is not True or False", v);
      return -1;
    }
  } else if (strcmp(key, "expandable_slack_percent") == 0) {
    if (kvconf_double(v, 0, 100, &d))
      goto bad_value;
    c->expandable_slack = d / 100;
  } else if (strcmp(key, "round_linear_cutoff") == 0) {
    if (kvconf_u64(v, 12, 40, &u))
      goto bad_value;
    c->round_linear_cutoff = (unsigned)u;
  } else if (strcmp(key, "fault_every_n") == 0) {
    if (kvconf_u64(v, 0, UINT32_MAX, &u))
      goto bad_value;
    c->fault_every_n = (unsigned)u;
  } else if (strcmp(key, "fault_rate") == 0) {
    if (kvconf_double(v, 0, 1, &d))
      goto bad_value;
    c->fault_rate = d;
  } else if (strcmp(key, "fault_seed") == 0) {
    if (kvconf_u64(v, 0, UINT64_MAX, &u))
      goto bad_value;
    c->fault_seed = u;
  } else {
    snprintf(err, errlen, "unknown key '%s'", key);
    return -1;
  }
  return 0;
bad_choice:
  snprintf(err, errlen, "%s: unknown value '%s'", key, v);
  return -1;
bad_value:
  snprintf(err, errlen, "%s: bad or out-of-range value '%s'", key, v);
  return -1;
}

gpupool_status pool_config_build(const gpupool_options *opt, pool_config *out) {
  pool_config c;
  char err[256];
  set_defaults(&c);
  if (opt) {
    if (opt->name && set_name(&c, opt->name, err, sizeof err))
      return pool_fail(GPUPOOL_ERR_INVALID, "gpupool options: %s", err);
    if (opt->device < 0 || opt->device > 1023)
      return pool_fail(GPUPOOL_ERR_INVALID, "gpupool options: device %d out of range", opt->device);
    if ((unsigned)opt->backend > GPUPOOL_BACKEND_SIM)
      return pool_fail(GPUPOOL_ERR_INVALID, "gpupool options: unknown backend %d", opt->backend);
    if ((unsigned)opt->strategy > GPUPOOL_STRATEGY_NAIVE)
      return pool_fail(GPUPOOL_ERR_INVALID, "gpupool options: unknown strategy %d", opt->strategy);
    c.device = opt->device;
    c.backend = opt->backend;
    c.strategy = opt->strategy;
    if (opt->host_capacity)
      c.host_capacity = opt->host_capacity;
    if (kvconf_parse(opt->tunables, apply_pair, &c, err, sizeof err))
      return pool_fail(GPUPOOL_ERR_INVALID, "gpupool tunables: %s", err);
  }
  if (!opt || !opt->ignore_env) {
    const char *env = getenv("GPUPOOL_CONF");
    if (kvconf_parse(env, apply_pair, &c, err, sizeof err)) {
      fprintf(stderr, "gpupool: GPUPOOL_CONF: %s\n", err);
      return pool_fail(GPUPOOL_ERR_INVALID, "GPUPOOL_CONF: %s", err);
    }
  }
  if (c.strategy == GPUPOOL_STRATEGY_DEFAULT)
    c.strategy = GPUPOOL_STRATEGY_BFC;
  *out = c;
  return GPUPOOL_OK;
}
