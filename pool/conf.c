#include "conf.h"

#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/kvconf.h"
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
  c->expandable_growth_moves = 0;
  c->memory_fraction = -1;
}

static int set_name(pool_config *c, const char *name, char *err, size_t errlen) {
  _Static_assert(sizeof c->name > POOL_NAME_MAX, "pool_config.name holds the longest name");
  if (pool_name_check(name, err, errlen))
    return -1;
  memcpy(c->name, name, strlen(name) + 1);
  return 0;
}

/* Setters of the option table: each stores one checked value. */
#define FIELD_SETTER(fn, stmt)                                                                     \
  static int fn(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {              \
    pool_config *c = ctx;                                                                          \
    stmt;                                                                                          \
    return 0;                                                                                      \
  }
FIELD_SETTER(set_backend, c->backend = (gpupool_backend)v.u)
FIELD_SETTER(set_strategy, c->strategy = (gpupool_strategy)v.u)
FIELD_SETTER(set_device, c->device = (int)v.u)
FIELD_SETTER(set_host_capacity, c->host_capacity = (size_t)v.u * MiB)
FIELD_SETTER(set_max_split, c->max_split_size = v.u == UINT64_MAX ? SIZE_MAX : (size_t)v.u * MiB)
FIELD_SETTER(set_max_non_split, c->max_non_split_rounding = (size_t)v.u * MiB)
FIELD_SETTER(set_gc_threshold, c->gc_threshold = v.d)
FIELD_SETTER(set_reserve_percent, c->reserve_percent = v.d)
FIELD_SETTER(set_memory_fraction, c->memory_fraction = v.d)
FIELD_SETTER(set_expandable, c->expandable = (int)v.u)
FIELD_SETTER(set_expandable_slack, c->expandable_slack = v.d / 100)
FIELD_SETTER(set_expandable_growth, c->expandable_growth_moves = (unsigned)v.u)
FIELD_SETTER(set_round_linear_cutoff, c->round_linear_cutoff = (unsigned)v.u)
FIELD_SETTER(set_fault_every_n, c->fault_every_n = (unsigned)v.u; c->fault_key = o->key)
FIELD_SETTER(set_fault_rate, c->fault_rate = v.d; c->fault_key = o->key)
FIELD_SETTER(set_fault_seed, c->fault_seed = v.u; c->fault_key = o->key)

static int set_name_opt(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  return set_name(ctx, v.s, err, errlen);
}

static int set_divisions(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  if (v.u > 1 && (v.u & (v.u - 1))) {
    snprintf(err, errlen,
             "roundup_power2_divisions: %llu is not a power of two (1, 2, 4, ... 64; "
             "per-interval lists are not supported)",
             (unsigned long long)v.u);
    return -1;
  }
  ((pool_config *)ctx)->roundup_power2_divisions = (unsigned)v.u;
  return 0;
}

static const kvopt_choice backends[] = {{"cuda", GPUPOOL_BACKEND_CUDA},
                                        {"cuda_async", GPUPOOL_BACKEND_CUDA_ASYNC},
                                        {"host", GPUPOOL_BACKEND_HOST},
                                        {"sim", GPUPOOL_BACKEND_SIM},
                                        {NULL, 0}};
static const kvopt_choice strategies[] = {{"bfc", GPUPOOL_STRATEGY_BFC},
                                          {"round", GPUPOOL_STRATEGY_ROUND},
                                          {"naive", GPUPOOL_STRATEGY_NAIVE},
                                          {NULL, 0}};
static const kvopt_choice unlimited[] = {{"inf", UINT64_MAX}, {"unlimited", UINT64_MAX}, {NULL, 0}};

/* The keys of GPUPOOL_CONF and of gpupool_options.tunables (README.md, the key table). */
static const kvopt pool_options[] = {
    {"backend", KVOPT_CHOICE, .choices = backends, .set = set_backend},
    {"strategy", KVOPT_CHOICE, .choices = strategies, .set = set_strategy},
    {"device", KVOPT_U64, 0, 1023, .set = set_device},
    {"name", KVOPT_STRING, .set = set_name_opt},
    {"host_capacity_mb", KVOPT_U64, 1, (uint64_t)1 << 30, .set = set_host_capacity},
    /* > 20 MiB, as PyTorch requires */
    {"max_split_size_mb", KVOPT_U64, 21, (uint64_t)1 << 30, .choices = unlimited,
     .range = "21 to 1073741824, or inf", .set = set_max_split},
    {"max_non_split_rounding_mb", KVOPT_U64, 0, (uint64_t)1 << 30, .set = set_max_non_split},
    {"roundup_power2_divisions", KVOPT_U64, 0, 64,
     .range = "0 (off) or a power of two from 1 to 64", .set = set_divisions},
    {"garbage_collection_threshold", KVOPT_DOUBLE, .dmin = 0, .dmax = 1, .open_min = 1,
     .open_max = 1, .set = set_gc_threshold},
    {"reserve_percent", KVOPT_DOUBLE, .dmin = 0, .dmax = 50, .set = set_reserve_percent},
    {"memory_fraction", KVOPT_DOUBLE, .dmin = 0, .dmax = 1, .set = set_memory_fraction},
    {"expandable_segments", KVOPT_BOOL, .set = set_expandable},
    {"expandable_slack_percent", KVOPT_DOUBLE, .dmin = 0, .dmax = 100, .set = set_expandable_slack},
    {"expandable_growth_moves", KVOPT_U64, 0, 1 << 20, .set = set_expandable_growth},
    {"round_linear_cutoff", KVOPT_U64, 12, 40, .set = set_round_linear_cutoff},
    {"fault_every_n", KVOPT_U64, 0, UINT32_MAX, .set = set_fault_every_n},
    {"fault_rate", KVOPT_DOUBLE, .dmin = 0, .dmax = 1, .set = set_fault_rate},
    {"fault_seed", KVOPT_U64, 0, UINT64_MAX, .set = set_fault_seed},
};
#define N_POOL_OPTIONS (sizeof pool_options / sizeof pool_options[0])

/* opt's fields and tunables over the defaults, then conf (the text of
 * GPUPOOL_CONF; NULL: none). */
static gpupool_status build(const gpupool_options *opt, const char *conf, pool_config *out) {
  pool_config c;
  char err[768];
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
    if ((uint64_t)opt->host_capacity > (uint64_t)1 << 50) /* host_capacity_mb's bound */
      return pool_fail(GPUPOOL_ERR_INVALID,
                       "gpupool options: host_capacity %zu bytes is out of range (1 PiB at most)",
                       opt->host_capacity);
    if (opt->host_capacity)
      c.host_capacity = opt->host_capacity;
    if (kvopt_parse(opt->tunables, pool_options, N_POOL_OPTIONS, &c, err, sizeof err))
      return pool_fail(GPUPOOL_ERR_INVALID, "gpupool tunables: %s", err);
  }
  if (kvopt_parse(conf, pool_options, N_POOL_OPTIONS, &c, err, sizeof err))
    return pool_fail(GPUPOOL_ERR_INVALID, "GPUPOOL_CONF: %s", err);
  if (c.strategy == GPUPOOL_STRATEGY_DEFAULT)
    c.strategy = GPUPOOL_STRATEGY_BFC;
  *out = c;
  return GPUPOOL_OK;
}

gpupool_status pool_config_build(const gpupool_options *opt, pool_config *out) {
  return build(opt, !opt || !opt->ignore_env ? getenv("GPUPOOL_CONF") : NULL, out);
}

gpupool_status pool_config_check(const pool_config *c) {
  /* Any fault_* key given, even one that injects nothing: ignoring it would
   * hide a configuration meant for another backend. */
  if (c->fault_key && c->backend != GPUPOOL_BACKEND_DEFAULT && c->backend != GPUPOOL_BACKEND_HOST)
    return pool_fail(GPUPOOL_ERR_INVALID, "pool '%s': %s: fault injection needs backend host",
                     c->name, c->fault_key);
  if (c->expandable && c->strategy != GPUPOOL_STRATEGY_BFC)
    return pool_fail(GPUPOOL_ERR_INVALID, "pool '%s': expandable_segments needs strategy bfc",
                     c->name);
  /* Known without the device (stream-ordered allocation maps no pages of
   * its own): gpupool_conf_check says it as gpupool_create does. Whether
   * another backend has virtual memory management is the device's to say. */
  if (c->expandable && c->backend == GPUPOOL_BACKEND_CUDA_ASYNC)
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "pool '%s': expandable_segments needs virtual memory management, which "
                     "backend cuda_async does not have (use backend cuda, host or sim)",
                     c->name);
  return GPUPOOL_OK;
}

gpupool_status gpupool_conf_check(const gpupool_options *opt, const char *conf) {
  pool_config c;
  gpupool_status st = build(opt, conf, &c);
  return st != GPUPOOL_OK ? st : pool_config_check(&c);
}
