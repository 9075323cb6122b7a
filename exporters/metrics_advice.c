#include "metrics_advice.h"

#include <stddef.h>

/* The live pool of this id in s, or NULL: a pool gone since the advice was
 * computed has no gauges, and a live one's take the label it has now (the
 * later pools of a name are numbered anew as earlier ones go). */
static const metrics_pool *live_pool(const metrics_snapshot *s, uint32_t id) {
  for (size_t i = 0; i < s->npools; i++)
    if (s->pools[i].id == id)
      return &s->pools[i];
  return NULL;
}

void metrics_write_advice(prom_writer *w, const metrics_snapshot *s, const advice_summary *a,
                          double now_s) {
  if (!a->valid)
    return;
  const char *labels = metrics_labels(s, s->process_labels);
  prom_family(w, "gpupool_advice_age_seconds", PROM_GAUGE,
              "Time since /advice last replayed the pools' histories.");
  prom_gauge_double(w, labels, NULL, 0, now_s - a->computed_at_s);
  prom_family(w, "gpupool_advice_compute_seconds", PROM_GAUGE,
              "Wall time of the last /advice computation.");
  prom_gauge_double(w, labels, NULL, 0, a->compute_s);
  static const struct {
    const char *name, *help;
    size_t off;
  } fam[] = {
      {"gpupool_advice_input_events", "Events of the history the last /advice replayed.",
       offsetof(advice_pool_summary, events)},
      {"gpupool_advice_current_peak_reserved_bytes",
       "Peak reserved bytes the replay predicts under the pool's own configuration.",
       offsetof(advice_pool_summary, current_peak_reserved)},
      {"gpupool_advice_recommended_peak_reserved_bytes",
       "Peak reserved bytes the replay predicts under the recommended configuration.",
       offsetof(advice_pool_summary, recommended_peak_reserved)},
      {"gpupool_advice_min_capacity_current_bytes",
       "Smallest device on which the history runs without an OOM, current configuration.",
       offsetof(advice_pool_summary, min_capacity_current)},
      {"gpupool_advice_min_capacity_recommended_bytes",
       "Smallest device on which the history runs without an OOM, recommended configuration.",
       offsetof(advice_pool_summary, min_capacity_recommended)},
  };
  for (size_t f = 0; f < sizeof fam / sizeof *fam; f++) {
    prom_family(w, fam[f].name, PROM_GAUGE, fam[f].help);
    for (size_t i = 0; i < a->npools; i++) {
      const advice_pool_summary *p = &a->pool[i];
      const metrics_pool *now = live_pool(s, p->pool_id);
      uint64_t v = *(const uint64_t *)((const char *)p + fam[f].off);
      if (!now || (v == 0 && fam[f].off >= offsetof(advice_pool_summary, min_capacity_current)))
        continue; /* gone, or not searched, or no capacity fits */
      /* the pool's labels, as its other series have them: joins on UUID too */
      prom_gauge_u64(w, metrics_labels(s, now->labels), NULL, 0, v);
    }
  }
}
