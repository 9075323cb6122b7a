/* The GPUPOOL_CONF line of a live pool's settings (live.h): the current
 * configuration /advice compares the candidates with. Every value is written
 * so that the pool's parser takes it back. */
#include <stdint.h>
#include <stdio.h>

#include "core/kvconf.h"
#include "live.h"
#include "pool/pool_internal.h"

/* Appends ",key:v" to out[0..n) with v as the parser reads it; past len
 * when v cannot be written, so that the line is dropped, never cut. */
static size_t add_double(char *out, size_t len, size_t n, const char *key, double v) {
  char num[64];
  if (kvconf_format_double(v, num, sizeof num))
    return len;
  return n + (size_t)snprintf(out + n, n < len ? len - n : 0, ",%s:%s", key, num);
}

static void conf_text(const pool_config *c, char *out, size_t len) {
  size_t n = 0;
#define ADD(...) n += (size_t)snprintf(out + n, n < len ? len - n : 0, __VA_ARGS__)
  out[0] = 0;
  if (c->strategy == GPUPOOL_STRATEGY_ROUND)
    ADD(",strategy:round,round_linear_cutoff:%u", c->round_linear_cutoff);
  else if (c->strategy == GPUPOOL_STRATEGY_NAIVE)
    ADD(",strategy:naive");
  if (c->max_split_size != SIZE_MAX)
    ADD(",max_split_size_mb:%zu", c->max_split_size / MiB);
  if (c->max_non_split_rounding != 20 * MiB)
    ADD(",max_non_split_rounding_mb:%zu", c->max_non_split_rounding / MiB);
  if (c->roundup_power2_divisions > 1)
    ADD(",roundup_power2_divisions:%u", c->roundup_power2_divisions);
  if (c->gc_threshold > 0)
    n = add_double(out, len, n, "garbage_collection_threshold", c->gc_threshold);
  if (c->reserve_percent > 0)
    n = add_double(out, len, n, "reserve_percent", c->reserve_percent);
  if (c->expandable)
    ADD(",expandable_segments:True");
  if (c->expandable && c->expandable_slack != 0.05)
    n = add_double(out, len, n, "expandable_slack_percent", c->expandable_slack * 100);
  if (c->expandable && c->expandable_growth_moves != 0)
    ADD(",expandable_growth_moves:%u", c->expandable_growth_moves);
#undef ADD
  if (n >= len) /* not with the 256 bytes /advice gives, short of a value of 60 digits */
    out[0] = 0;
  else if (out[0] == ',')
    for (size_t i = 0; i <= n; i++)
      out[i] = out[i + 1];
}

void advisor_conf_of_pool(const gpupool *p, char *out, size_t len) {
  conf_text(&p->cfg, out, len);
}
