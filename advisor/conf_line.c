/* The GPUPOOL_CONF line of a live pool's settings (live.h): the current
 * configuration /advice compares the candidates with. */
#include <stdint.h>
#include <stdio.h>

#include "core/c_numeric.h"
#include "live.h"
#include "pool/pool_internal.h"

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
    ADD(",garbage_collection_threshold:%g", c->gc_threshold);
  if (c->reserve_percent > 0)
    ADD(",reserve_percent:%g", c->reserve_percent);
  if (c->expandable)
    ADD(",expandable_segments:True");
  if (c->expandable && c->expandable_slack != 0.05)
    ADD(",expandable_slack_percent:%g", c->expandable_slack * 100);
  if (c->expandable && c->expandable_growth_moves != 0)
    ADD(",expandable_growth_moves:%u", c->expandable_growth_moves);
#undef ADD
  if (n >= len) /* cannot happen with the 256 bytes /advice gives; never a cut line */
    out[0] = 0;
  else if (out[0] == ',')
    for (size_t i = 0; i <= n; i++)
      out[i] = out[i + 1];
}

void advisor_conf_of_pool(const gpupool *p, char *out, size_t len) {
  locale_t old = c_numeric_enter(); /* "garbage_collection_threshold:0.7", as the parser reads */
  conf_text(&p->cfg, out, len);
  c_numeric_leave(old);
}
