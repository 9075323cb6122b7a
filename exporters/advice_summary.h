/* What the last /advice computation found per pool (agent/advice.c fills
 * it; exporters/metrics_advice.c renders it as the gpupool_advice_* gauges). */
#ifndef GPUPOOL_ADVICE_SUMMARY_H
#define GPUPOOL_ADVICE_SUMMARY_H

#include <stddef.h>
#include <stdint.h>

/* A pool is named by its id alone: its gauges take the label and device it
 * has at each render (metrics_write_advice), and go with it. */
typedef struct advice_pool_summary {
  uint32_t pool_id;
  uint64_t events;
  uint64_t current_peak_reserved, recommended_peak_reserved;
  uint64_t min_capacity_current, min_capacity_recommended; /* 0: unknown */
} advice_pool_summary;

typedef struct advice_summary {
  int valid;            /* computed at least once */
  double computed_at_s; /* CLOCK_REALTIME seconds */
  double compute_s;
  uint64_t runs;
  size_t npools;
  advice_pool_summary *pool; /* npools entries, one per pool with advice */
} advice_summary;

#endif
