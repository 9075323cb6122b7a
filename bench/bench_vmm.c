/* bench_vmm: what the device calls behind expandable segments cost per page,
 * and what requesting shareable pages (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
 * which gpupool's cuda backend asks for so that a block can be exported)
 * adds: cuMemCreate, cuMemMap + cuMemSetAccess, cuMemUnmap and cuMemRelease
 * of one page, plain and shareable side by side. The two kinds take turns
 * batch by batch (the order alternating), so a slow phase of the host hits
 * both; each figure is the median over the rounds of a batch's mean. Then
 * runs of 1 to 64 pages mapped and unmapped per page against per run (one
 * cuMemSetAccess, one cuMemUnmap over the run's mappings), and one page
 * mapped and unmapped on an idle device and on one busy with other work.
 * Last, whether the driver lets several threads' page calls overlap: a run
 * mapped and unmapped by one thread against split among 2, 4 and 8 threads
 * calling at once, taking turns.
 *
 *   bench_vmm [--quick]
 *
 * Needs a CUDA device; without one it says so and exits 0. */
#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_device.h"

enum { OP_CREATE, OP_MAP, OP_UNMAP, OP_RELEASE, OP_EXPORT, N_OPS };
static const char *const op_name[N_OPS] = {"cuMemCreate", "cuMemMap + cuMemSetAccess", "cuMemUnmap",
                                           "cuMemRelease",
                                           "cuMemExportToShareableHandle (+ close)"};

static double now_ns(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#define CHECK(call)                                                                                \
  do {                                                                                             \
    CUresult r_ = (call);                                                                          \
    if (r_ != CUDA_SUCCESS) {                                                                      \
      const char *s_ = NULL;                                                                       \
      cuGetErrorString(r_, &s_);                                                                   \
      fprintf(stderr, "bench_vmm: %s: %s\n", #call, s_ ? s_ : "unknown error");                    \
      return -1;                                                                                   \
    }                                                                                              \
  } while (0)

typedef struct vmm_ctx {
  CUdevice dev;
  size_t page;
  CUdeviceptr base; /* a reservation of `pages` pages */
  int pages;
  CUmemGenericAllocationHandle *h;
} vmm_ctx;

/* The properties of one page on device dev, plain or shareable (a POSIX
 * file descriptor handle, as gpupool requests for export). */
static CUmemAllocationProp page_prop(CUdevice dev, int shareable) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = (int)dev;
  prop.requestedHandleTypes =
      shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

/* One batch: create, map, (export), unmap, release `pages` pages; adds each
 * step's mean ns per page to t[op]. */
static int batch(const vmm_ctx *c, int shareable, double t[N_OPS]) {
  CUmemAllocationProp prop = page_prop(c->dev, shareable);
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  double t0 = now_ns();
  for (int i = 0; i < c->pages; i++)
    CHECK(cuMemCreate(&c->h[i], c->page, &prop, 0));
  double t1 = now_ns();
  for (int i = 0; i < c->pages; i++) {
    CHECK(cuMemMap(c->base + (size_t)i * c->page, c->page, 0, c->h[i], 0));
    CHECK(cuMemSetAccess(c->base + (size_t)i * c->page, c->page, &access, 1));
  }
  double t2 = now_ns();
  if (shareable) {
    for (int i = 0; i < c->pages; i++) {
      int fd = -1;
      CHECK(
          cuMemExportToShareableHandle(&fd, c->h[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      close(fd);
    }
  }
  double t3 = now_ns();
  for (int i = 0; i < c->pages; i++)
    CHECK(cuMemUnmap(c->base + (size_t)i * c->page, c->page));
  double t4 = now_ns();
  for (int i = 0; i < c->pages; i++)
    CHECK(cuMemRelease(c->h[i]));
  double t5 = now_ns();
  t[OP_CREATE] = (t1 - t0) / c->pages;
  t[OP_MAP] = (t2 - t1) / c->pages;
  t[OP_EXPORT] = (t3 - t2) / c->pages;
  t[OP_UNMAP] = (t4 - t3) / c->pages;
  t[OP_RELEASE] = (t5 - t4) / c->pages;
  return 0;
}

/* A run of n pages mapped and unmapped the way the pool could: per page (a
 * cuMemSetAccess and a cuMemUnmap for each page's mapping) or per run (one
 * cuMemSetAccess, one cuMemUnmap over the n pages' mappings). Pages created
 * once, outside the timing. Adds mean ns per page to map_ns and unmap_ns;
 * returns 1 where the driver refuses the one-call form, -1 on an error. */
static int run_of_pages(const vmm_ctx *c, int n, int per_run, double *map_ns, double *unmap_ns) {
  CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)c->dev},
                            .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  double t0 = now_ns();
  for (int i = 0; i < n; i++) {
    CHECK(cuMemMap(c->base + (size_t)i * c->page, c->page, 0, c->h[i], 0));
    if (!per_run)
      CHECK(cuMemSetAccess(c->base + (size_t)i * c->page, c->page, &access, 1));
  }
  if (per_run)
    CHECK(cuMemSetAccess(c->base, (size_t)n * c->page, &access, 1));
  double t1 = now_ns();
  if (per_run) {
    CUresult r = cuMemUnmap(c->base, (size_t)n * c->page);
    if (r != CUDA_SUCCESS) { /* unmap page by page, and say so */
      for (int i = 0; i < n; i++)
        CHECK(cuMemUnmap(c->base + (size_t)i * c->page, c->page));
      return 1;
    }
  } else {
    for (int i = 0; i < n; i++)
      CHECK(cuMemUnmap(c->base + (size_t)i * c->page, c->page));
  }
  double t2 = now_ns();
  *map_ns = (t1 - t0) / n;
  *unmap_ns = (t2 - t1) / n;
  return 0;
}

/* The second table: per page against per run, for runs of 1..c->pages pages,
 * the two forms taking turns. */
static int runs_table(vmm_ctx *c, int rounds) {
  CUmemAllocationProp prop = page_prop(c->dev, 0);
  for (int i = 0; i < c->pages; i++)
    CHECK(cuMemCreate(&c->h[i], c->page, &prop, 0));
  double *v = calloc((size_t)rounds * 4, sizeof(double));
  if (!v)
    return -1;
  printf("\nA run of pages mapped and unmapped per page (cuMemSetAccess and cuMemUnmap for each "
         "page) and per run (one cuMemSetAccess and one cuMemUnmap over the run), ns per page, "
         "median over rounds, the two forms taking turns:\n\n");
  printf("| pages | map + access, per page | per run | ratio | unmap, per page | per run | ratio "
         "|\n|---:|---:|---:|---:|---:|---:|---:|\n");
  int refused = 0;
  for (int n = 1; n <= c->pages; n *= 4) {
    for (int r = 0; r < rounds; r++)
      for (int j = 0; j < 2; j++) {
        int per_run = (j + r) % 2;
        int st = run_of_pages(c, n, per_run, &v[(per_run * 2) * rounds + r],
                              &v[(per_run * 2 + 1) * rounds + r]);
        if (st < 0)
          return -1;
        refused |= st;
      }
    double m[4];
    for (int k = 0; k < 4; k++)
      m[k] = median(&v[k * rounds], rounds);
    printf("| %d | %.0f | %.0f | %.3f | %.0f | %.0f | %.3f |\n", n, m[0], m[2], m[2] / m[0], m[1],
           m[3], m[3] / m[1]);
  }
  if (refused)
    printf("\nthe driver refused one cuMemUnmap over several pages' mappings: those rows unmapped "
           "page by page\n");
  for (int i = 0; i < c->pages; i++)
    CHECK(cuMemRelease(c->h[i]));
  free(v);
  return 0;
}

/* Whether the calls wait for the device: one page mapped (+ access) and
 * unmapped right after a long cuMemsetD8Async over other memory was queued
 * on a stream of its own, against the same on an idle device. A call that
 * waits for queued work takes about as long as the memset (printed too). */
static int busy_table(vmm_ctx *c, int rounds) {
  CUmemAllocationProp prop = page_prop(c->dev, 0);
  CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  const size_t busy_bytes = (size_t)4 << 30;
  CUdeviceptr busy;
  CUstream s;
  CHECK(cuMemAlloc(&busy, busy_bytes));
  CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CHECK(cuMemCreate(&c->h[0], c->page, &prop, 0));
  double *v = calloc((size_t)rounds * 5, sizeof(double));
  if (!v)
    return -1;
  for (int r = 0; r < rounds; r++)
    for (int j = 0; j < 2; j++) {
      int loaded = (j + r) % 2;
      if (loaded)
        CHECK(cuMemsetD8Async(busy, (unsigned char)r, busy_bytes, s));
      double t0 = now_ns();
      CHECK(cuMemMap(c->base, c->page, 0, c->h[0], 0));
      CHECK(cuMemSetAccess(c->base, c->page, &access, 1));
      double t1 = now_ns();
      CHECK(cuMemUnmap(c->base, c->page));
      double t2 = now_ns();
      CHECK(cuStreamSynchronize(s));
      double t3 = now_ns();
      v[(loaded * 2) * rounds + r] = t1 - t0;
      v[(loaded * 2 + 1) * rounds + r] = t2 - t1;
      if (loaded)
        v[4 * rounds + r] = t3 - t0; /* at least the memset's remaining time */
    }
  double m[5];
  for (int k = 0; k < 5; k++)
    m[k] = median(&v[k * rounds], rounds);
  printf("\nOne page mapped and unmapped on an idle device and right after a 4 GiB "
         "cuMemsetD8Async was queued on another stream (ns, median over rounds; a call that "
         "waited for the memset would take about as long as it: %.0f ns from the map to the "
         "memset's end):\n\n",
         m[4]);
  printf("| call | idle | busy | busy / idle |\n|---|---:|---:|---:|\n");
  printf("| cuMemMap + cuMemSetAccess | %.0f | %.0f | %.3f |\n", m[0], m[2], m[2] / m[0]);
  printf("| cuMemUnmap | %.0f | %.0f | %.3f |\n", m[1], m[3], m[3] / m[1]);
  CHECK(cuMemRelease(c->h[0]));
  CHECK(cuStreamDestroy(s));
  CHECK(cuMemFree(busy));
  free(v);
  return 0;
}

/* One thread's share of a run in threads_table: pages [first, first + n)
 * mapped (+ access), then unmapped, `rounds` times, each phase started by
 * a barrier shared with the other threads of the run. */
typedef struct slice {
  const vmm_ctx *c;
  pthread_barrier_t *phase;
  int first, n, rounds;
  CUresult err;
  const char *call; /* the call that failed */
} slice;

/* Maps and unmaps s's pages once, between the run's barriers; where map_ns
 * is not NULL, the time from the first barrier to the end of everyone's maps
 * (the second), and to the end of everyone's unmaps (the third). */
static void slice_once(slice *s, double *map_ns, double *unmap_ns) {
  CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = (int)s->c->dev},
                            .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CUdeviceptr at = s->c->base + (size_t)s->first * s->c->page;
  size_t len = (size_t)s->n * s->c->page;
  double t0 = now_ns();
  pthread_barrier_wait(s->phase);
  for (int i = 0; i < s->n && !s->err; i++) {
    s->err = cuMemMap(at + (size_t)i * s->c->page, s->c->page, 0, s->c->h[s->first + i], 0);
    s->call = "cuMemMap";
  }
  if (!s->err) {
    s->err = cuMemSetAccess(at, len, &access, 1);
    s->call = "cuMemSetAccess";
  }
  pthread_barrier_wait(s->phase);
  double t1 = now_ns();
  if (!s->err) {
    s->err = cuMemUnmap(at, len);
    s->call = "cuMemUnmap";
  }
  pthread_barrier_wait(s->phase);
  if (map_ns) {
    *map_ns = t1 - t0;
    *unmap_ns = now_ns() - t1;
  }
}

static void *slice_thread(void *arg) {
  slice *s = arg;
  for (int r = 0; r < s->rounds; r++)
    slice_once(s, NULL, NULL);
  return NULL;
}

/* Whether the driver lets several threads' page calls overlap: a run of n
 * pages mapped (+ access) and unmapped by one thread, against the same run
 * split into k slices, one per thread, all started at once (k - 1 threads
 * of its own, started once, and the measuring thread). The two forms take
 * turns round by round. Where the calls overlap, k threads take about 1/k
 * of one thread's time; where the driver serializes them, as long or
 * longer. */
static int threads_table(vmm_ctx *c, int rounds) {
  CUmemAllocationProp prop = page_prop(c->dev, 0);
  for (int i = 0; i < c->pages; i++)
    CHECK(cuMemCreate(&c->h[i], c->page, &prop, 0));
  double *v = calloc((size_t)rounds * 4, sizeof(double));
  if (!v)
    return -1;
  printf("\nA run of pages mapped (+ access) and unmapped by one thread, and split among k "
         "threads calling at once (µs per run, median over rounds, the two taking turns; "
         "one / k above 1 means the calls overlap):\n\n");
  printf("| pages | threads | map, one | map, k | one / k | unmap, one | unmap, k | one / k "
         "|\n|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  static const int threads[] = {2, 4, 8};
  int n = c->pages;
  for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
    int k = threads[t];
    slice s[8];
    pthread_t tid[8];
    pthread_barrier_t phase;
    pthread_barrier_init(&phase, NULL, (unsigned)k);
    for (int i = 0; i < k; i++)
      s[i] = (slice){.c = c,
                     .phase = &phase,
                     .first = i * n / k,
                     .n = (i + 1) * n / k - i * n / k,
                     .rounds = rounds};
    for (int i = 1; i < k; i++)
      if (pthread_create(&tid[i], NULL, slice_thread, &s[i]) != 0) {
        fprintf(stderr, "bench_vmm: pthread_create failed\n");
        return -1;
      }
    pthread_barrier_t solo;
    pthread_barrier_init(&solo, NULL, 1);
    slice alone = {.c = c, .phase = &solo, .first = 0, .n = n};
    for (int r = 0; r < rounds; r++)
      for (int j = 0; j < 2; j++) {
        int split = (j + r) % 2;
        slice_once(split ? &s[0] : &alone, &v[(split * 2) * rounds + r],
                   &v[(split * 2 + 1) * rounds + r]);
      }
    for (int i = 1; i < k; i++)
      pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&phase);
    pthread_barrier_destroy(&solo);
    for (int i = 0; i <= k; i++) {
      const slice *f = i < k ? &s[i] : &alone;
      if (f->err) {
        const char *why = NULL;
        cuGetErrorString(f->err, &why);
        fprintf(stderr, "bench_vmm: %s: %s\n", f->call, why ? why : "unknown error");
        return -1;
      }
    }
    double m[4];
    for (int i = 0; i < 4; i++)
      m[i] = median(&v[i * rounds], rounds) / 1000;
    printf("| %d | %d | %.0f | %.0f | %.2f | %.0f | %.0f | %.2f |\n", n, k, m[0], m[2], m[0] / m[2],
           m[1], m[3], m[1] / m[3]);
  }
  for (int i = 0; i < c->pages; i++)
    CHECK(cuMemRelease(c->h[i]));
  free(v);
  return 0;
}

int main(int argc, char **argv) {
  int quick = argc > 1 && !strcmp(argv[1], "--quick");
  if (argc > 2 || (argc == 2 && !quick)) {
    fprintf(stderr, "usage: bench_vmm [--quick]\n");
    return 2;
  }
  int count = 0;
  if (cuInit(0) != CUDA_SUCCESS || cuDeviceGetCount(&count) != CUDA_SUCCESS || count == 0) {
    printf("bench_vmm: no CUDA device: nothing to measure\n");
    return 0;
  }
  vmm_ctx c = {.pages = quick ? 16 : 64};
  CUcontext ctx;
  CHECK(cuDeviceGet(&c.dev, 0));
  CHECK(cuDevicePrimaryCtxRetain(&ctx, c.dev));
  CHECK(cuCtxSetCurrent(ctx));
  int fd_ok = 0;
  CHECK(cuDeviceGetAttribute(
      &fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, c.dev));
  char name[256] = "";
  CHECK(cuDeviceGetName(name, sizeof name, c.dev));
  CUmemAllocationProp prop = page_prop(c.dev, 0);
  CHECK(cuMemGetAllocationGranularity(&c.page, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CHECK(cuMemAddressReserve(&c.base, c.page * (size_t)c.pages, c.page, 0, 0));
  c.h = calloc((size_t)c.pages, sizeof *c.h);
  int rounds = quick ? 5 : 41;
  double *v[2][N_OPS];
  for (int k = 0; k < 2; k++)
    for (int op = 0; op < N_OPS; op++)
      v[k][op] = calloc((size_t)rounds, sizeof(double));
  if (!c.h || !v[1][N_OPS - 1])
    return 1;
  int kinds = fd_ok ? 2 : 1;
  for (int r = 0; r < rounds; r++)
    for (int j = 0; j < kinds; j++) {
      int k = kinds == 2 ? (j + r) % 2 : 0; /* alternate which goes first */
      double t[N_OPS];
      if (batch(&c, k, t) != 0)
        return 1;
      for (int op = 0; op < N_OPS; op++)
        v[k][op][r] = t[op];
    }
  bench_device d;
  bench_device_probe(&d);
  char when[64];
  bench_now_utc(when, sizeof when);
  printf("## bench_vmm, %s\n\n- device: %s; page %zu KiB; %d rounds of %d pages per kind\n"
         "- host: %s\n",
         when, name, c.page >> 10, rounds, c.pages, d.host);
  printf("\nns per page (median over rounds of a batch's mean):\n\n");
  printf("| call | plain | shareable | shareable / plain |\n|---|---:|---:|---:|\n");
  for (int op = 0; op < N_OPS; op++) {
    double plain = op == OP_EXPORT ? 0 : median(v[0][op], rounds);
    double share = kinds == 2 ? median(v[1][op], rounds) : 0;
    if (op == OP_EXPORT)
      printf("| %s | - | %.0f | - |\n", op_name[op], share);
    else if (kinds == 2)
      printf("| %s | %.0f | %.0f | %.3f |\n", op_name[op], plain, share, share / plain);
    else
      printf("| %s | %.0f | n/a | n/a |\n", op_name[op], plain);
  }
  if (kinds == 1)
    printf("\nthe device cannot export POSIX file descriptors: shareable pages not measured\n");
  if (runs_table(&c, rounds) != 0 || busy_table(&c, rounds) != 0 || threads_table(&c, rounds) != 0)
    return 1;
  cuMemAddressFree(c.base, c.page * (size_t)c.pages);
  cuDevicePrimaryCtxRelease(c.dev);
  return 0;
}
