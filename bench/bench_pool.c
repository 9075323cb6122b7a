/* bench_pool: the hot path, side by side. ns per malloc+free pair (a cache
 * hit after the warm-up) for gpupool's three strategies, PyTorch's caching
 * allocator (when its shim was built), cudaMalloc and cudaMallocAsync, at
 * sizes from 512 B to 256 MiB; on one thread, on N threads each on its own
 * stream and on N threads sharing one stream. Prints markdown tables (or CSV)
 * with the device name. Without a GPU, gpupool runs on its host backend and
 * the CUDA columns say "n/a (no GPU)".
 *
 *   bench_pool [--quick] [--csv] [--csv-file PATH] [--threads N] [--no-torch]
 *
 * --csv prints CSV instead of the tables; --csv-file writes it to PATH too.
 *
 * Exit status 1 when an allocator that is available failed a measurement. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_alloc.h"
#include "bench_device.h"
#include "bench_format.h"
#include "pair_timer.h"

enum { COL_BFC, COL_ROUND, COL_NAIVE, COL_TORCH, COL_CUDA, COL_ASYNC, NCOLS };
enum { MODE_ONE, MODE_OWN_STREAMS, MODE_ONE_STREAM, NMODES };

static const size_t sizes[] = {512, 4096, 65536, 1 << 20, 16 << 20, 256 << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static const char *col_names[NCOLS] = {"gpupool bfc", "gpupool round", "gpupool naive",
                                       "torch",       "cudaMalloc",    "cudaMallocAsync"};
static const char *col_csv[NCOLS] = {"gpupool_bfc", "gpupool_round", "gpupool_naive",
                                     "torch",       "cudaMalloc",    "cudaMallocAsync"};

typedef struct column {
  bench_alloc a;
  int ok;
  char why[200];
} column;

typedef struct options {
  int quick, csv, threads, no_torch;
  const char *csv_file;
} options;

static int parse_args(int argc, char **argv, options *o) {
  *o = (options){.threads = 8};
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick")) {
      o->quick = 1;
    } else if (!strcmp(argv[i], "--csv")) {
      o->csv = 1;
    } else if (!strcmp(argv[i], "--no-torch")) {
      o->no_torch = 1;
    } else if (!strcmp(argv[i], "--csv-file") && i + 1 < argc) {
      o->csv_file = argv[++i];
    } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
      o->threads = atoi(argv[++i]);
      if (o->threads < 1 || o->threads > 256) {
        fprintf(stderr, "bench_pool: --threads must be 1..256\n");
        return -1;
      }
    } else {
      fprintf(stderr, "usage: bench_pool [--quick] [--csv] [--csv-file PATH] [--threads N] "
                      "[--no-torch]\n");
      return -1;
    }
  }
  return 0;
}

static void open_columns(const bench_device *d, const options *o, column *c) {
  static const gpupool_strategy strategies[3] = {GPUPOOL_STRATEGY_BFC, GPUPOOL_STRATEGY_ROUND,
                                                 GPUPOOL_STRATEGY_NAIVE};
  for (int i = 0; i < 3; i++)
    c[i].ok = !bench_alloc_gpupool(&c[i].a, col_csv[i], d->backend, strategies[i], NULL, 0,
                                   c[i].why, sizeof c[i].why);
  if (!d->gpu) {
    for (int i = COL_TORCH; i < NCOLS; i++)
      snprintf(c[i].why, sizeof c[i].why, "no GPU");
    return;
  }
  if (o->no_torch)
    snprintf(c[COL_TORCH].why, sizeof c[COL_TORCH].why, "--no-torch");
  else
    c[COL_TORCH].ok =
        !bench_alloc_torch(&c[COL_TORCH].a, d->device, c[COL_TORCH].why, sizeof c[COL_TORCH].why);
  c[COL_CUDA].ok =
      !bench_alloc_cuda(&c[COL_CUDA].a, d->device, 0, c[COL_CUDA].why, sizeof c[COL_CUDA].why);
  c[COL_ASYNC].ok = !bench_alloc_cuda_async(&c[COL_ASYNC].a, d->device, c[COL_ASYNC].why,
                                            sizeof c[COL_ASYNC].why);
}

static void trim(const column *c) {
  if (c->ok && c->a.trim)
    c->a.trim(c->a.ctx);
}

/* One thread: every available column side by side at one size. */
static void measure_one_thread(const column *cols, size_t size, void *stream, const pair_plan *plan,
                               double *out) {
  const bench_alloc *a[NCOLS];
  for (int k = 0; k < NCOLS; k++)
    a[k] = cols[k].ok ? &cols[k].a : NULL;
  pair_ns_side_by_side(a, NCOLS, size, stream, plan, out);
  for (int k = 0; k < NCOLS; k++)
    trim(&cols[k]);
}

/* Threads: M pairs/s of one column at one size. */
static double measure_threads(const column *c, int mode, size_t size, void **streams, void **shared,
                              int threads, const pair_plan *plan) {
  double v =
      pairs_per_s_threads(&c->a, size, mode == MODE_OWN_STREAMS ? streams : shared, threads, plan) /
      1e6;
  trim(c);
  return v;
}

static void mode_title(int mode, int threads, char *buf, size_t len) {
  if (mode == MODE_ONE)
    snprintf(buf, len, "1 thread: ns per malloc+free pair (median; lower is better)");
  else
    snprintf(buf, len, "%d threads, %s: total M pairs/s (median; higher is better)", threads,
             mode == MODE_OWN_STREAMS ? "each on its own stream" : "all on one stream");
}

static void cell(double v, int mode, const column *c, char *buf, size_t len) {
  if (!c->ok)
    snprintf(buf, len, "n/a (%.*s)", (int)strcspn(c->why, ":"), c->why); /* details: header */
  else if (isnan(v))
    snprintf(buf, len, "failed");
  else if (mode == MODE_ONE)
    snprintf(buf, len, v < 10000 ? "%.1f" : "%.0f", v);
  else
    snprintf(buf, len, v < 0.01 ? "%.2g" : v < 10 ? "%.3f" : v < 100 ? "%.2f" : "%.1f", v);
}

/* How many times faster gpupool bfc is than column `other`. */
static void ratio(double bfc, double other, int mode, char *buf, size_t len) {
  if (isnan(bfc) || isnan(other) || bfc <= 0 || other <= 0) {
    snprintf(buf, len, "-");
    return;
  }
  double r = mode == MODE_ONE ? other / bfc : bfc / other;
  snprintf(buf, len, r < 10 ? "%.2fx" : r < 1000 ? "%.1fx" : "%.0fx", r);
}

static void print_table(int mode, int threads, const column *c, double res[][NCOLS]) {
  char title[160];
  mode_title(mode, threads, title, sizeof title);
  printf("\n### %s\n\n", title);
  printf("| size |");
  for (int k = 0; k < NCOLS; k++)
    printf(" %s |", col_names[k]);
  printf(" torch / bfc | cudaMalloc / bfc | cudaMallocAsync / bfc |\n|---:|");
  for (int k = 0; k < NCOLS + 3; k++)
    printf("---:|");
  printf("\n");
  for (size_t s = 0; s < NSIZES; s++) {
    char buf[240];
    bench_bytes(sizes[s], buf, sizeof buf);
    printf("| %s |", buf);
    for (int k = 0; k < NCOLS; k++) {
      cell(res[s][k], mode, &c[k], buf, sizeof buf);
      printf(" %s |", buf);
    }
    for (int k = COL_TORCH; k < NCOLS; k++) {
      ratio(res[s][COL_BFC], c[k].ok ? res[s][k] : NAN, mode, buf, sizeof buf);
      printf(" %s |", buf);
    }
    printf("\n");
  }
}

static void print_csv(FILE *f, int mode, int threads, const column *c, double res[][NCOLS]) {
  static const char *mode_names[NMODES] = {"one_thread", "threads_own_streams",
                                           "threads_one_stream"};
  for (size_t s = 0; s < NSIZES; s++)
    for (int k = 0; k < NCOLS; k++) {
      fprintf(f, "%s,%d,%zu,%s,", mode_names[mode], mode == MODE_ONE ? 1 : threads, sizes[s],
              col_csv[k]);
      if (c[k].ok && !isnan(res[s][k]))
        fprintf(f, "%.4f,", res[s][k]);
      else
        fprintf(f, "NA,");
      fprintf(f, "%s,", mode == MODE_ONE ? "ns_per_pair" : "Mpairs_per_s");
      bench_csv_field(f, !c[k].ok ? c[k].why : isnan(res[s][k]) ? "failed" : "");
      fputc('\n', f);
    }
}

typedef struct run_info {
  char date[64];
  const bench_device *d;
  const char *torch;
  const pair_plan *plan;
  const options *o;
} run_info;

static void write_csv(FILE *f, const run_info *r, const column *c, double res[][NSIZES][NCOLS]) {
  fprintf(f, "# bench_pool %s%s | device: %s | host: %s | torch: %s\n", r->date,
          r->o->quick ? " (quick)" : "", r->d->name, r->d->host, r->torch);
  fprintf(f, "mode,threads,size_bytes,allocator,value,unit,note\n");
  for (int m = 0; m < NMODES; m++)
    print_csv(f, m, r->o->threads, c, res[m]);
}

static void print_tables(const run_info *r, const column *c, double res[][NSIZES][NCOLS]) {
  const pair_plan *plan = r->plan;
  printf("## bench_pool, %s%s\n\n", r->date, r->o->quick ? " (--quick: few repetitions)" : "");
  printf("- device: %s\n- host: %s\n", r->d->name, r->d->host);
  printf("- gpupool %s, backend %s; strategies bfc, round, naive with default tunables\n",
         GPUPOOL_VERSION, r->d->gpu ? "cuda" : "host");
  printf("- torch: %s\n", r->torch);
  printf("- cudaMallocAsync: the device's default memory pool, release threshold UINT64_MAX\n");
  printf("- method: an untimed warm-up of %.0f ms fills each cache; then the median of %d timed "
         "batches of ~%.1f ms (one thread; the allocators take turns, a batch each) or of %d "
         "timed runs of %.0f ms (threads)\n",
         plan->warmup_ns / 1e6, plan->reps, plan->batch_ns / 1e6, plan->runs, plan->run_ns / 1e6);
  printf("- ratios: how many times faster gpupool bfc is than the column named\n");
  for (int m = 0; m < NMODES; m++)
    print_table(m, r->o->threads, c, res[m]);
}

/* Every available column, mode and size; 1 when a measurement failed. */
static int run_all(const options *o, column *cols, void **streams, void **shared,
                   const pair_plan *plan, double res[][NSIZES][NCOLS]) {
  static const char *mode_names[NMODES] = {"1 thread", "own streams", "one stream"};
  char sz[32];
  for (size_t s = 0; s < NSIZES; s++) {
    bench_bytes(sizes[s], sz, sizeof sz);
    fprintf(stderr, "bench_pool: %s, every allocator side by side, %s\n", mode_names[MODE_ONE], sz);
    measure_one_thread(cols, sizes[s], streams[0], plan, res[MODE_ONE][s]);
  }
  for (int m = MODE_ONE + 1; m < NMODES; m++)
    for (int k = 0; k < NCOLS; k++)
      for (size_t s = 0; s < NSIZES; s++) {
        res[m][s][k] = NAN;
        if (!cols[k].ok)
          continue;
        bench_bytes(sizes[s], sz, sizeof sz);
        fprintf(stderr, "bench_pool: %s, %s, %s\n", mode_names[m], col_names[k], sz);
        res[m][s][k] = measure_threads(&cols[k], m, sizes[s], streams, shared, o->threads, plan);
      }
  int failed = 0;
  for (int m = 0; m < NMODES; m++)
    for (int k = 0; k < NCOLS; k++)
      for (size_t s = 0; s < NSIZES; s++)
        failed |= cols[k].ok && isnan(res[m][s][k]);
  return failed;
}

int main(int argc, char **argv) {
  options o;
  if (parse_args(argc, argv, &o))
    return 2;
  const pair_plan plan = o.quick ? (pair_plan){.warmup_ns = 2000000,
                                               .batch_ns = 200000,
                                               .reps = 5,
                                               .run_ns = 10000000,
                                               .runs = 3}
                                 : (pair_plan){.warmup_ns = 20000000,
                                               .batch_ns = 2000000,
                                               .reps = 21,
                                               .run_ns = 50000000,
                                               .runs = 7};
  bench_device d;
  bench_device_probe(&d);
  column cols[NCOLS];
  memset(cols, 0, sizeof cols);
  open_columns(&d, &o, cols);

  void **streams = bench_streams_create(&d, o.threads);
  void **shared = calloc((size_t)o.threads, sizeof *shared);
  if (!streams || !shared) {
    fprintf(stderr, "bench_pool: could not create %d streams\n", o.threads);
    return 1;
  }
  for (int i = 0; i < o.threads; i++)
    shared[i] = streams[0];

  /* The first column is measured first: spin a while so that it does not
   * run on a CPU still at idle clocks. */
  for (uint64_t t0 = bench_clock_ns(); bench_clock_ns() - t0 < (o.quick ? 100000000u : 500000000u);)
    ;
  static double res[NMODES][NSIZES][NCOLS];
  int failed = run_all(&o, cols, streams, shared, &plan, res);

  run_info r = {.d = &d, .plan = &plan, .o = &o};
  bench_now_utc(r.date, sizeof r.date);
  r.torch = cols[COL_TORCH].ok ? bench_torch_version() : cols[COL_TORCH].why;
  if (o.csv)
    write_csv(stdout, &r, cols, res);
  else
    print_tables(&r, cols, res);
  if (o.csv_file) {
    FILE *f = fopen(o.csv_file, "w");
    if (f) {
      write_csv(f, &r, cols, res);
      fclose(f);
    } else {
      fprintf(stderr, "bench_pool: cannot write %s\n", o.csv_file);
      failed = 1;
    }
  }

  for (int k = 0; k < NCOLS; k++)
    if (cols[k].ok)
      bench_alloc_destroy(&cols[k].a);
  bench_streams_destroy(&d, streams, o.threads);
  free(shared);
  return failed;
}
