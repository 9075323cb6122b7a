/* bench_cupti: what CUPTI memory activity costs the application. ns per
 * cudaMallocAsync+cudaFreeAsync pair and per cudaMalloc+cudaFree pair (and a
 * gpupool cache hit, which makes no CUDA call), and per page move of
 * expandable segments (one page mapped, made accessible and unmapped: the
 * calls behind gpupool's num_pages_moved, which CUPTI reports as an
 * allocation and a release), with the agent's CUPTI subscriber off and on
 * in alternating rounds (started and stopped each round), side by side with
 * the on/off ratio. Also prints what the subscriber counted meanwhile (records,
 * drops, buffers refused), since a fast allocation loop is its worst case.
 *
 *   bench_cupti [--quick] [--size BYTES]
 *
 * Without a GPU it prints why and exits 0. Exit 1 when a measurement failed
 * or CUPTI could not start. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef GPUPOOL_HAVE_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#endif

#include "agent/cupti.h"
#include "bench_alloc.h"
#include "bench_device.h"
#include "bench_format.h"
#include "pair_timer.h"

enum { ROW_ASYNC, ROW_CUDA, ROW_VMM, ROW_POOL, NROWS };
enum { OFF, ON, NPHASES };
enum { MAX_ROUNDS = 5 };

static const char *row_names[NROWS] = {"cudaMallocAsync + cudaFreeAsync", "cudaMalloc + cudaFree",
                                       "cuMemMap + cuMemSetAccess + cuMemUnmap (one page)",
                                       "gpupool bfc (cache hit)"};

typedef struct row {
  bench_alloc a;
  int ok;
  char why[200];
  const pair_plan *plan;
} row;

/* One physical page mapped into a reserved range and unmapped again, behind
 * the allocator interface (the requested size is ignored: a page is the
 * unit): what moving one idle page costs expandable segments. The driver's
 * functions are looked up through the runtime, so that the program still
 * starts (and says "no GPU") where there is no driver. */
#ifdef GPUPOOL_HAVE_CUDA
static struct {
  PFN_cuMemGetAllocationGranularity_v10020 granularity;
  PFN_cuMemAddressReserve_v10020 reserve;
  PFN_cuMemAddressFree_v10020 address_free;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemSetAccess_v10020 set_access;
  PFN_cuMemUnmap_v10020 unmap;
} drv;

static int drv_resolve(char *why, size_t whylen) {
  static const struct {
    const char *name;
    void **fn;
  } syms[] = {
      {"cuMemGetAllocationGranularity", (void **)&drv.granularity},
      {"cuMemAddressReserve", (void **)&drv.reserve},
      {"cuMemAddressFree", (void **)&drv.address_free},
      {"cuMemCreate", (void **)&drv.create},
      {"cuMemRelease", (void **)&drv.release},
      {"cuMemMap", (void **)&drv.map},
      {"cuMemSetAccess", (void **)&drv.set_access},
      {"cuMemUnmap", (void **)&drv.unmap},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(syms[i].name, syms[i].fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      snprintf(why, whylen, "the driver has no %s", syms[i].name);
      return -1;
    }
  }
  return 0;
}

typedef struct vmm_page {
  CUdeviceptr va;
  size_t page;
  CUmemGenericAllocationHandle handle;
  CUmemAccessDesc access;
} vmm_page;

static int vmm_map(void *ctx, void **ptr, size_t size, void *stream) {
  vmm_page *v = ctx;
  if (drv.map(v->va, v->page, 0, v->handle, 0) != CUDA_SUCCESS)
    return -1;
  if (drv.set_access(v->va, v->page, &v->access, 1) != CUDA_SUCCESS) {
    drv.unmap(v->va, v->page);
    return -1;
  }
  *ptr = (void *)(uintptr_t)v->va;
  return 0;
}

static void vmm_unmap(void *ctx, void *ptr, size_t size, void *stream) {
  vmm_page *v = ctx;
  drv.unmap(v->va, v->page);
}

static void vmm_destroy(void *ctx) {
  vmm_page *v = ctx;
  drv.release(v->handle);
  drv.address_free(v->va, v->page);
  free(v);
}

/* The runtime made the device's primary context current (bench_alloc_cuda
 * ran first); the driver's calls use it. */
static int vmm_page_alloc(bench_alloc *a, int device, char *why, size_t whylen) {
  memset(a, 0, sizeof *a);
  if (drv_resolve(why, whylen))
    return -1;
  CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                              .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = device}};
  vmm_page *v = calloc(1, sizeof *v);
  if (!v) {
    snprintf(why, whylen, "out of host memory");
    return -1;
  }
  const char *call = "cuMemGetAllocationGranularity";
  CUresult r = drv.granularity(&v->page, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r == CUDA_SUCCESS) {
    call = "cuMemAddressReserve";
    r = drv.reserve(&v->va, v->page, 0, 0, 0);
  }
  if (r == CUDA_SUCCESS) {
    call = "cuMemCreate";
    r = drv.create(&v->handle, v->page, &prop, 0);
    if (r != CUDA_SUCCESS)
      drv.address_free(v->va, v->page);
  }
  if (r != CUDA_SUCCESS) {
    snprintf(why, whylen, "%s failed (CUresult %d)", call, (int)r);
    free(v);
    return -1;
  }
  v->access.location = prop.location;
  v->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  snprintf(a->name, sizeof a->name, "vmm page");
  a->ctx = v;
  a->alloc = vmm_map;
  a->free = vmm_unmap;
  a->destroy = vmm_destroy;
  return 0;
}
#else
static int vmm_page_alloc(bench_alloc *a, int device, char *why, size_t whylen) {
  memset(a, 0, sizeof *a);
  snprintf(why, whylen, "built without CUDA");
  return -1;
}
#endif

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
  rows[ROW_VMM].ok =
      rows[ROW_CUDA].ok &&
      !vmm_page_alloc(&rows[ROW_VMM].a, dev.device, rows[ROW_VMM].why, sizeof rows[ROW_VMM].why);
  if (!rows[ROW_CUDA].ok)
    snprintf(rows[ROW_VMM].why, sizeof rows[ROW_VMM].why, "%s", rows[ROW_CUDA].why);
  rows[ROW_POOL].ok =
      !bench_alloc_gpupool(&rows[ROW_POOL].a, "gpupool_bfc", dev.backend, GPUPOOL_STRATEGY_BFC,
                           NULL, 0, rows[ROW_POOL].why, sizeof rows[ROW_POOL].why);
  rows[ROW_ASYNC].plan = &fast;
  rows[ROW_CUDA].plan = &slow;
  rows[ROW_VMM].plan = &slow;
  rows[ROW_POOL].plan = &fast;
  void **streams = bench_streams_create(&dev, 1);
  if (!streams) {
    fprintf(stderr, "bench_cupti: cannot create a stream\n");
    return 1;
  }

  /* Rounds of one phase off and one on, the order alternating, so that a
   * slow stretch of the host (the GPU machine's has one) hits both alike. */
  const int rounds = quick ? 2 : 5;
  double ns[NPHASES][MAX_ROUNDS][NROWS];
  cupti_metrics m = {0};
  for (int k = 0; k < rounds; k++)
    for (int half = 0; half < 2; half++) {
      int phase = (half ^ (k & 1)) ? ON : OFF;
      if (phase == OFF) {
        measure(rows, streams[0], size, ns[OFF][k]);
        continue;
      }
      if (cupti_start(GPUPOOL_CUPTI_FORCE) != GPUPOOL_OK) {
        fprintf(stderr, "bench_cupti: CUPTI did not start: %s\n", gpupool_last_error());
        return 1;
      }
      measure(rows, streams[0], size, ns[ON][k]);
      cupti_flush();
      cupti_get_metrics(&m);
      cupti_stop();
    }

  printf("| pair | CUPTI off (ns) | CUPTI on (ns) | on / off | on / off per round (min-max) |\n");
  printf("|---|---:|---:|---:|---|\n");
  int failed = 0;
  for (int r = 0; r < NROWS; r++) {
    if (!rows[r].ok) {
      printf("| %s | n/a (%s) | | | |\n", row_names[r], rows[r].why);
      continue;
    }
    double off[MAX_ROUNDS], on[MAX_ROUNDS], ratio[MAX_ROUNDS], lo = INFINITY, hi = -INFINITY;
    for (int k = 0; k < rounds; k++) {
      off[k] = ns[OFF][k][r];
      on[k] = ns[ON][k][r];
      ratio[k] = on[k] / off[k];
      failed |= isnan(ratio[k]);
      lo = ratio[k] < lo ? ratio[k] : lo;
      hi = ratio[k] > hi ? ratio[k] : hi;
    }
    double off_ns = bench_median(off, rounds), on_ns = bench_median(on, rounds);
    printf("| %s | %.0f | %.0f | %.2fx | %.2f-%.2f |\n", row_names[r], off_ns, on_ns,
           bench_median(ratio, rounds), lo, hi);
  }
  printf("\nWhile on, in the last round: %llu records decoded, %llu dropped by CUPTI, %llu buffer "
         "requests refused, %llu flushes.\n",
         (unsigned long long)m.records_total, (unsigned long long)m.records_dropped_total,
         (unsigned long long)m.buffers_exhausted_total, (unsigned long long)m.flushes_total);
  printf("%d rounds of CUPTI off and on (the order alternating; CUPTI started and stopped each "
         "round); each figure the median of %d (fast) / %d (cudaMalloc, page) timed batches, one "
         "thread, one stream; columns: the medians over the rounds.\n",
         rounds, fast.reps, slow.reps);

  bench_streams_destroy(&dev, streams, 1);
  for (int r = 0; r < NROWS; r++)
    if (rows[r].ok)
      bench_alloc_destroy(&rows[r].a);
  return failed;
}
