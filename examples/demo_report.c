/* One summary line per pool: memory held and used, external fragmentation,
 * share of allocations served from the cache, retries, OOMs, steps, and the
 * trace events overwritten in its rings (gpupool_trace_events_dropped_total). */
#include "demo_report.h"

#include "gpupool/agent.h"

static double mib(int64_t bytes) {
  return (double)bytes / (1024.0 * 1024.0);
}

void demo_report_header(FILE *f) {
  fprintf(f, "%-4s %-14s %12s %12s %12s %6s %7s %8s %6s %8s %9s %10s\n", "dev", "pool",
          "reserved_MiB", "alloc_MiB", "peak_MiB", "frag", "cached", "retries", "ooms", "steps",
          "oom_steps", "ev_dropped");
}

void demo_report_line(FILE *f, const demo_replica *r) {
  gpupool_stats s;
  if (gpupool_get_stats(r->pool, &s) != GPUPOOL_OK)
    return;
  int64_t reserved = s.reserved_bytes[GPUPOOL_STAT_ALL].current;
  int64_t allocated = s.allocated_bytes[GPUPOOL_STAT_ALL].current;
  int64_t free_bytes = reserved - allocated;
  double frag = free_bytes > 0 ? 1.0 - (double)s.largest_free_block / (double)free_bytes : 0.0;
  if (frag < 0)
    frag = 0;
  uint64_t allocs = s.num_cache_hits + s.num_device_sourced;
  double cached = allocs ? (double)s.num_cache_hits / (double)allocs : 0.0;
  /* Events overwritten in the pool's rings: gpupool_trace_events_dropped_total. */
  uint64_t recorded = 0, ev_dropped = 0;
  gpupool_trace_event_counts(r->pool, &recorded, &ev_dropped);
  fprintf(f, "%-4d %-14s %12.1f %12.1f %12.1f %5.0f%% %6.1f%% %8llu %6llu %8llu %9llu %10llu\n",
          gpupool_device(r->pool), gpupool_name(r->pool), mib(reserved), mib(allocated),
          mib(s.reserved_bytes[GPUPOOL_STAT_ALL].peak), 100.0 * frag, 100.0 * cached,
          (unsigned long long)s.num_alloc_retries, (unsigned long long)s.num_ooms,
          (unsigned long long)r->steps, (unsigned long long)r->dropped,
          (unsigned long long)ev_dropped);
}
