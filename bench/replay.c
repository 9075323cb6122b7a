/* bench_replay: memory efficiency, side by side. Replays allocation traces
 * (trace_file.h; written by GPUPOOL_RECORD or tests/gpu/torch_train.py, or
 * made by bench/make_trace.py) against every allocator: gpupool bfc (default
 * and tuned), round and naive, PyTorch's caching allocator (when its shim was
 * built), cudaMalloc and cudaMallocAsync; reports peak reserved / peak
 * allocated and device calls for each. Without a GPU only the gpupool rows
 * run, on the host backend.
 *
 *   bench_replay [--csv] [--no-torch] [--conf LABEL=TUNABLES]... TRACE...
 *
 * --conf adds a gpupool row with those tunables (GPUPOOL_CONF grammar), e.g.
 * --conf "bfc mss:64=max_split_size_mb:64". Exit status 1 when a trace cannot
 * be read or an allocation failed in an allocator that is available. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_alloc.h"
#include "bench_device.h"
#include "bench_format.h"
#include "pair_timer.h"
#include "trace_file.h"

#define MAX_CONFS 16

typedef struct conf_row {
  char label[48];
  gpupool_strategy strategy;
  const char *tunables;
} conf_row;

typedef struct options {
  int csv, no_torch;
  conf_row rows[MAX_CONFS];
  int n_rows;
  char **traces;
  int n_traces;
} options;

typedef struct result {
  char name[48];
  int ok;
  char why[200];
  bench_alloc_stats st;
  int have_stats;
  double ns_per_event;
  size_t failed;
} result;

static void add_row(options *o, const char *label, gpupool_strategy s, const char *tunables) {
  conf_row *r = &o->rows[o->n_rows++];
  snprintf(r->label, sizeof r->label, "gpupool %s", label);
  r->strategy = s;
  r->tunables = tunables;
}

static int parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  add_row(o, "bfc", GPUPOOL_STRATEGY_BFC, NULL);
  add_row(o, "bfc rp2:4", GPUPOOL_STRATEGY_BFC, "roundup_power2_divisions:4");
  add_row(o, "bfc rp2:8", GPUPOOL_STRATEGY_BFC, "roundup_power2_divisions:8");
  add_row(o, "round", GPUPOOL_STRATEGY_ROUND, NULL);
  add_row(o, "naive", GPUPOOL_STRATEGY_NAIVE, NULL);
  add_row(o, "bfc expandable", GPUPOOL_STRATEGY_BFC, "expandable_segments:True");
  o->traces = calloc((size_t)argc, sizeof *o->traces);
  if (!o->traces)
    return -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--csv")) {
      o->csv = 1;
    } else if (!strcmp(argv[i], "--no-torch")) {
      o->no_torch = 1;
    } else if (!strcmp(argv[i], "--conf") && i + 1 < argc) {
      char *eq = strchr(argv[++i], '=');
      if (!eq || eq == argv[i] || o->n_rows == MAX_CONFS) {
        fprintf(stderr, "bench_replay: --conf takes LABEL=TUNABLES (at most %d rows)\n", MAX_CONFS);
        return -1;
      }
      *eq = 0;
      add_row(o, argv[i], GPUPOOL_STRATEGY_DEFAULT, eq + 1);
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "bench_replay: unknown option %s\n", argv[i]);
      o->n_traces = 0;
      break;
    } else {
      o->traces[o->n_traces++] = argv[i];
    }
  }
  if (o->n_traces == 0) {
    fprintf(stderr,
            "usage: bench_replay [--csv] [--no-torch] [--conf LABEL=TUNABLES]... TRACE...\n");
    return -1;
  }
  return 0;
}

/* Replays t through a; fills r. Leaves a's cache trimmed. */
static void replay(const trace *t, bench_alloc *a, void **streams, result *r) {
  void **ptrs = calloc(t->n_allocs ? t->n_allocs : 1, sizeof *ptrs);
  if (!ptrs) {
    r->ok = 0;
    snprintf(r->why, sizeof r->why, "out of host memory");
    return;
  }
  uint64_t t0 = bench_clock_ns();
  for (size_t i = 0; i < t->n_ops; i++) {
    uint32_t slot = t->ops[i].slot;
    void *stream = streams[t->slot_stream[slot]];
    if (t->ops[i].is_alloc) {
      if (a->alloc(a->ctx, &ptrs[slot], t->slot_size[slot], stream)) {
        ptrs[slot] = NULL;
        r->failed++;
      }
    } else if (ptrs[slot]) {
      a->free(a->ctx, ptrs[slot], t->slot_size[slot], stream);
      ptrs[slot] = NULL;
    }
  }
  if (a->sync)
    for (int s = 0; s < t->n_streams; s++)
      a->sync(a->ctx, streams[s]);
  uint64_t t1 = bench_clock_ns();
  r->ns_per_event = t->n_ops ? (double)(t1 - t0) / (double)t->n_ops : 0;
  r->have_stats = a->stats && a->stats(a->ctx, &r->st) == 0;
  /* What the trace left live is freed after the statistics were read. */
  for (size_t s = 0; s < t->n_allocs; s++)
    if (ptrs[s])
      a->free(a->ctx, ptrs[s], t->slot_size[s], streams[t->slot_stream[s]]);
  if (a->trim)
    a->trim(a->ctx);
  free(ptrs);
}

/* Makes allocator k of the list (gpupool rows, then torch, cudaMalloc,
 * cudaMallocAsync); 0 or -1 with r->why. */
static int make_alloc(int k, const options *o, const bench_device *d, size_t host_capacity,
                      bench_alloc *a, result *r) {
  if (k < o->n_rows) {
    const conf_row *row = &o->rows[k];
    snprintf(r->name, sizeof r->name, "%s", row->label);
    return bench_alloc_gpupool(a, "replay", d->backend, row->strategy, row->tunables, host_capacity,
                               r->why, sizeof r->why);
  }
  k -= o->n_rows;
  static const char *names[] = {"torch", "cudaMalloc", "cudaMallocAsync"};
  snprintf(r->name, sizeof r->name, "%s", names[k]);
  if (!d->gpu) {
    snprintf(r->why, sizeof r->why, "no GPU");
    return -1;
  }
  if (k == 0) {
    if (o->no_torch) {
      snprintf(r->why, sizeof r->why, "--no-torch");
      return -1;
    }
    return bench_alloc_torch(a, d->device, r->why, sizeof r->why);
  }
  if (k == 1)
    return bench_alloc_cuda(a, d->device, 1, r->why, sizeof r->why);
  return bench_alloc_cuda_async(a, d->device, r->why, sizeof r->why);
}

static void ratio(uint64_t num, uint64_t den, char *buf, size_t len) {
  if (den == 0)
    snprintf(buf, len, "-");
  else
    snprintf(buf, len, "%.3f", (double)num / (double)den);
}

/* Two counts in format, or `unknown` when the allocator does not say. */
static void print_pair(int known, uint64_t x, uint64_t y, const char *format, const char *unknown) {
  if (known)
    printf(format, (unsigned long long)x, (unsigned long long)y);
  else
    printf("%s", unknown);
}

static void print_csv(const char *path, const trace *t, const result *res, int n) {
  for (int i = 0; i < n; i++) {
    const result *r = &res[i];
    bench_csv_field(stdout, path);
    printf(",");
    bench_csv_field(stdout, r->name);
    if (!r->ok) {
      printf(",NA,NA,NA,NA,NA,NA,NA,NA,%llu,", (unsigned long long)t->peak_requested);
      bench_csv_field(stdout, r->why);
      printf("\n");
      continue;
    }
    const char *csv = ",%llu,%llu", *na = ",NA,NA";
    print_pair(r->have_stats, r->st.peak_reserved, r->st.peak_allocated, csv, na);
    print_pair(r->have_stats && r->st.have_device_calls, r->st.device_allocs, r->st.device_frees,
               csv, na);
    print_pair(r->have_stats && r->st.have_pages, r->st.pages_moved, r->st.device_syncs, csv, na);
    printf(",%.1f,%zu,%llu,\n", r->ns_per_event, r->failed, (unsigned long long)t->peak_requested);
  }
}

static void print_table(const char *path, const trace *t, const result *res, int n) {
  char b1[32], b2[32], b3[32], b4[32];
  bench_bytes(t->peak_requested, b1, sizeof b1);
  bench_bytes(t->max_size, b2, sizeof b2);
  printf("\n### %s\n\n%zu allocations, %zu frees (%zu of unknown ids skipped, %zu live at the "
         "end), %d stream%s; peak requested %s, largest allocation %s\n\n",
         path, t->n_allocs, t->n_frees, t->n_unmatched_frees, t->n_live_at_end, t->n_streams,
         t->n_streams == 1 ? "" : "s", b1, b2);
  printf(
      "| allocator | peak reserved | peak allocated | reserved / allocated | reserved / "
      "requested | device allocs | device frees | pages moved | syncs | unmaps while allocating | "
      "ns per event | failed allocs |\n");
  printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (int i = 0; i < n; i++) {
    const result *r = &res[i];
    if (!r->ok) {
      printf("| %s | n/a (%s) | | | | | | | | | | |\n", r->name, r->why);
      continue;
    }
    if (r->have_stats) {
      bench_bytes(r->st.peak_reserved, b1, sizeof b1);
      bench_bytes(r->st.peak_allocated, b2, sizeof b2);
      ratio(r->st.peak_reserved, r->st.peak_allocated, b3, sizeof b3);
      ratio(r->st.peak_reserved, t->peak_requested, b4, sizeof b4);
    } else {
      snprintf(b1, sizeof b1, "n/a");
      snprintf(b2, sizeof b2, "n/a");
      snprintf(b3, sizeof b3, "-");
      snprintf(b4, sizeof b4, "-");
    }
    printf("| %s | %s | %s | %s | %s |", r->name, b1, b2, b3, b4);
    print_pair(r->have_stats && r->st.have_device_calls, r->st.device_allocs, r->st.device_frees,
               " %llu | %llu |", " n/a | n/a |");
    print_pair(r->have_stats && r->st.have_pages, r->st.pages_moved, r->st.device_syncs,
               " %llu | %llu |", " - | - |");
    if (r->have_stats && r->st.have_pages)
      printf(" %llu |", (unsigned long long)r->st.alloc_unmaps);
    else
      printf(" - |");
    printf(" %.1f | %zu |\n", r->ns_per_event, r->failed);
  }
}

static int replay_trace(const char *path, const options *o, const bench_device *d) {
  trace t;
  char err[512];
  if (trace_load(path, &t, err, sizeof err)) {
    fprintf(stderr, "bench_replay: %s\n", err);
    return 1;
  }
  /* The simulated device must hold the trace whatever the strategy wastes. */
  size_t host_capacity = (size_t)(4 * t.peak_requested + 2 * t.max_size) + ((size_t)1 << 30);
  if (host_capacity < ((size_t)8 << 30))
    host_capacity = (size_t)8 << 30;

  /* Stream value 0 is the default stream (NULL); the others are made here. */
  void **made = t.n_streams ? bench_streams_create(d, t.n_streams) : NULL;
  void **streams = calloc((size_t)t.n_streams + 1, sizeof *streams);
  if ((t.n_streams && !made) || !streams) {
    fprintf(stderr, "bench_replay: could not create %d streams\n", t.n_streams);
    trace_release(&t);
    return 1;
  }
  for (int s = 0; s < t.n_streams; s++)
    streams[s] = t.streams[s] ? made[s] : NULL;

  int n = o->n_rows + 3, rc = 0;
  result *res = calloc((size_t)n, sizeof *res);
  for (int k = 0; res && k < n; k++) {
    bench_alloc a;
    res[k].ok = !make_alloc(k, o, d, host_capacity, &a, &res[k]);
    if (!res[k].ok)
      continue;
    fprintf(stderr, "bench_replay: %s: %s\n", path, res[k].name);
    replay(&t, &a, streams, &res[k]);
    if (res[k].failed)
      rc = 1;
    bench_alloc_destroy(&a);
  }
  if (res && o->csv)
    print_csv(path, &t, res, n);
  else if (res)
    print_table(path, &t, res, n);
  free(res);
  bench_streams_destroy(d, made, t.n_streams);
  free(streams);
  trace_release(&t);
  return rc;
}

int main(int argc, char **argv) {
  options o;
  if (parse_args(argc, argv, &o))
    return 2;
  bench_device d;
  bench_device_probe(&d);
  char date[64];
  bench_now_utc(date, sizeof date);
  if (o.csv) {
    printf("# bench_replay %s | device: %s | host: %s\n", date, d.name, d.host);
    printf("trace,allocator,peak_reserved,peak_allocated,device_allocs,device_frees,"
           "pages_moved,device_syncs,ns_per_event,failed_allocs,peak_requested,note\n");
  } else {
    printf("## bench_replay, %s\n\n- device: %s\n- host: %s\n", date, d.name, d.host);
    printf("- reserved / allocated: each allocator's own peaks; reserved / requested: against "
           "the most bytes the trace holds live at once (the same for every allocator)\n");
    printf("- cudaMalloc: reserved read with cudaMemGetInfo after each allocation; "
           "cudaMallocAsync: the pool's ReservedMemHigh / UsedMemHigh\n");
    printf("- rp2:N = roundup_power2_divisions:N; expandable = expandable_segments:True "
           "(pages moved: idle pages remapped under new blocks; syncs: device synchronizations "
           "before unmapping; unmaps while allocating: pages the allocations' slow path "
           "unmapped, a move's old mapping otherwise staying until a block goes over it)\n");
    const char *torch_conf = getenv("PYTORCH_CUDA_ALLOC_CONF");
    if (torch_conf && *torch_conf)
      printf("- torch row: PYTORCH_CUDA_ALLOC_CONF=%s\n", torch_conf);
  }
  int rc = 0;
  for (int i = 0; i < o.n_traces; i++)
    rc |= replay_trace(o.traces[i], &o, &d);
  if (!o.csv && bench_torch_version()[0])
    printf("\ntorch: %s\n", bench_torch_version());
  free(o.traces);
  return rc;
}
