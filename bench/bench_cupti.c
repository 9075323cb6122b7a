/* bench_cupti: what CUPTI memory activity costs the application. ns per
 * cudaMallocAsync+cudaFreeAsync pair and per cudaMalloc+cudaFree pair (and a
 * gpupool cache hit, which makes no CUDA call), with the agent's CUPTI
 * subscriber off, on, and off again after cupti_stop, side by side with the
 * on/off ratio. Also prints what the subscriber counted meanwhile (records,
 * drops, buffers refused), since a fast allocation loop is its worst case.
 *
 *   bench_cupti [--quick] [--size BYTES]
 *
 * Without a GPU it prints why and exits 0. Exit 1 when a measurement failed
 * or CUPTI could not start. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cupti.h"
#include "bench_alloc.h"
#include "bench_device.h"
#include "bench_format.h"
#include "pair_timer.h"

enum { ROW_ASYNC, ROW_CUDA, ROW_POOL, NROWS };
enum { OFF, ON, OFF_AGAIN, NPHASES };

static const char *row_names[NROWS] = {"cudaMallocAsync + cudaFreeAsync", "cudaMalloc + cudaFree",
                                       "gpupool bfc (cache hit)"};

typedef struct row {
  bench_alloc a;
  int ok;
  char why[200];
  const pair_plan *plan;
} row;

static void measure(row *rows, void *stream, size_t size, double out[NROWS]) {
  for (int r = 0; r < NROWS; r++)
    out[r] = rows[r].ok ? pair_ns_one_thread(&rows[r].a, size, stream, rows[r].plan) : NAN;
}

int main(int argc, char **argv) {
  int quick = 0;
  size_t size = 1 << 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      quick = 1;
    } else if (!strcmp(argv[i], "--size") && i + 1 < argc) {
      size = strtoull(argv[++i], NULL, 10);
    } else {
      fprintf(stderr, "usage: bench_cupti [--quick] [--size BYTES]\n");
      return 1;
    }
  }
  if (size == 0) {
    fprintf(stderr, "bench_cupti: --size must be > 0\n");
    return 1;
  }
  bench_device dev;
  bench_device_probe(&dev);
  char when[64], sz[32];
  bench_now_utc(when, sizeof when);
  bench_bytes(size, sz, sizeof sz);
  printf("# bench_cupti: CUPTI memory activity on vs off, %s pairs\n\n", sz);
  printf("- device: %s\n- host: %s\n- date: %s\n\n", dev.name, dev.host, when);
  if (!dev.gpu) {
    printf("No GPU: CUPTI records nothing here; nothing to measure.\n");
    return 0;
  }

  /* Fast pairs (~1 us) get short batches; cudaMalloc pairs (~100 us) longer. */
  const pair_plan fast =
      quick ? (pair_plan){.warmup_ns = 5000000, .batch_ns = 20000000, .reps = 5}
            : (pair_plan){.warmup_ns = 50000000, .batch_ns = 100000000, .reps = 11};
  const pair_plan slow =
      quick ? (pair_plan){.warmup_ns = 20000000, .batch_ns = 50000000, .reps = 3}
            : (pair_plan){.warmup_ns = 100000000, .batch_ns = 300000000, .reps = 7};
  row rows[NROWS] = {0};
  rows[ROW_ASYNC].ok = !bench_alloc_cuda_async(&rows[ROW_ASYNC].a, dev.device, rows[ROW_ASYNC].why,
                                               sizeof rows[ROW_ASYNC].why);
  rows[ROW_CUDA].ok = !bench_alloc_cuda(&rows[ROW_CUDA].a, dev.device, 0, rows[ROW_CUDA].why,
                                        sizeof rows[ROW_CUDA].why);
  rows[ROW_POOL].ok =
      !bench_alloc_gpupool(&rows[ROW_POOL].a, "gpupool_bfc", dev.backend, GPUPOOL_STRATEGY_BFC,
                           NULL, 0, rows[ROW_POOL].why, sizeof rows[ROW_POOL].why);
  rows[ROW_ASYNC].plan = &fast;
  rows[ROW_CUDA].plan = &slow;
  rows[ROW_POOL].plan = &fast;
  void **streams = bench_streams_create(&dev, 1);
  if (!streams) {
    fprintf(stderr, "bench_cupti: cannot create a stream\n");
    return 1;
  }

  double ns[NPHASES][NROWS];
  measure(rows, streams[0], size, ns[OFF]);
  if (cupti_start(GPUPOOL_CUPTI_FORCE) != GPUPOOL_OK) {
    fprintf(stderr, "bench_cupti: CUPTI did not start: %s\n", gpupool_last_error());
    return 1;
  }
  measure(rows, streams[0], size, ns[ON]);
  cupti_flush();
  cupti_metrics m;
  cupti_get_metrics(&m);
  cupti_stop();
  measure(rows, streams[0], size, ns[OFF_AGAIN]);

  printf("| pair | CUPTI off (ns) | CUPTI on (ns) | on / off | after cupti_stop (ns) |\n");
  printf("|---|---:|---:|---:|---:|\n");
  int failed = 0;
  for (int r = 0; r < NROWS; r++) {
    if (!rows[r].ok) {
      printf("| %s | n/a (%s) | | | |\n", row_names[r], rows[r].why);
      continue;
    }
    if (isnan(ns[OFF][r]) || isnan(ns[ON][r]) || isnan(ns[OFF_AGAIN][r]))
      failed = 1;
    printf("| %s | %.0f | %.0f | %.2fx | %.0f |\n", row_names[r], ns[OFF][r], ns[ON][r],
           ns[ON][r] / ns[OFF][r], ns[OFF_AGAIN][r]);
  }
  printf("\nWhile on: %llu records decoded, %llu dropped by CUPTI, %llu buffer requests refused, "
         "%llu flushes.\n",
         (unsigned long long)m.records_total, (unsigned long long)m.records_dropped_total,
         (unsigned long long)m.buffers_exhausted_total, (unsigned long long)m.flushes_total);
  printf("Median of %d (fast) / %d (cudaMalloc) timed batches, one thread, one stream.\n",
         fast.reps, slow.reps);

  bench_streams_destroy(&dev, streams, 1);
  for (int r = 0; r < NROWS; r++)
    if (rows[r].ok)
      bench_alloc_destroy(&rows[r].a);
  return failed;
}
