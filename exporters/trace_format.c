#include "trace_format.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cupti_data.h"

/* Spaces of the open-allocation set: pool blocks and CUPTI allocations may
 * share an address (a segment's first block starts where its cudaMalloc
 * did), and they carry different categories in the trace. */
enum { SPACE_POOL = 0, SPACE_CUPTI = 1 };

int trace_pid_of_device(int64_t device) {
  return device >= 0 && device < TRACE_HOST_PID - 1 ? (int)device + 1 : TRACE_HOST_PID;
}

static int64_t pool_tid(const trace_pool *p) {
  return TRACE_POOL_TID_BASE + 2 * (int64_t)p->info.id;
}

static int64_t calls_tid(const trace_pool *p) {
  return pool_tid(p) + 1;
}

static int64_t cupti_tid(int pid) {
  return TRACE_CUPTI_TID_BASE + pid;
}

int trace_format_init(trace_format *f, json_buf *out, trace_pool *pools, size_t npools,
                      uint64_t base_ns) {
  memset(f, 0, sizeof *f);
  f->out = out;
  f->pools = pools;
  f->npools = npools;
  f->base_ns = base_ns;
  trace_live_set_init(&f->live);
  f->pid_named = calloc(TRACE_HOST_PID + 1, 1);
  return f->pid_named ? 0 : -1;
}

void trace_format_free(trace_format *f) {
  trace_live_set_free(&f->live);
  free(f->pid_named);
  f->pid_named = NULL;
}

/* Whether pool i's label needs its id to be told apart (as
 * trace_format_label_pools says). */
static int label_repeated(const trace_pool *pools, size_t npools, size_t i) {
  for (size_t j = 0; j < npools; j++)
    if (j != i && pools[j].info.device == pools[i].info.device &&
        (pools[j].live || !pools[i].live) &&
        strcmp(pools[i].metrics_label, pools[j].metrics_label) == 0)
      return 1;
  return 0;
}

void trace_format_label_pools(trace_pool *pools, size_t npools) {
  for (size_t i = 0; i < npools; i++) {
    trace_pool *p = &pools[i];
    if (!label_repeated(pools, npools, i))
      snprintf(p->label, sizeof p->label, "pool %s", p->metrics_label);
    else
      snprintf(p->label, sizeof p->label, "pool %s (%sid %u)", p->metrics_label,
               p->live ? "" : "gone, ", (unsigned)p->info.id);
  }
}

trace_pool *trace_format_find_pool(const trace_format *f, uint32_t id) {
  size_t lo = 0, hi = f->npools;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (f->pools[mid].info.id == id)
      return &f->pools[mid];
    if (f->pools[mid].info.id < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

/* ---- event framing ---------------------------------------------------- */

static void ts_field(trace_format *f, const char *key, uint64_t ts_ns) {
  json_puts(f->out, key);
  json_ns_as_us(f->out, (int64_t)(ts_ns - f->base_ns));
}

/* Opens an event object: {"ph":..,"name":..,"cat":..,"pid":..,"tid":..
 * (cat omitted when NULL), without its time. */
static void open_event(trace_format *f, const char *ph, const char *name, const char *cat, int pid,
                       int64_t tid) {
  json_buf *o = f->out;
  json_puts(o, f->written++ ? ",\n{\"ph\":\"" : "\n{\"ph\":\"");
  json_puts(o, ph);
  json_puts(o, "\",\"name\":");
  json_string(o, name);
  if (cat) {
    json_puts(o, ",\"cat\":\"");
    json_puts(o, cat);
    json_putc(o, '"');
  }
  json_puts(o, ",\"pid\":");
  json_i64(o, pid);
  json_puts(o, ",\"tid\":");
  json_i64(o, tid);
}

/* open_event and ts. The caller adds fields and calls end_event. */
static void begin_event(trace_format *f, const char *ph, const char *name, const char *cat, int pid,
                        int64_t tid, uint64_t ts_ns) {
  open_event(f, ph, name, cat, pid, tid);
  ts_field(f, ",\"ts\":", ts_ns);
}

static void end_event(trace_format *f) {
  json_putc(f->out, '}');
}

static void arg_u64(json_buf *o, const char *key, uint64_t v) {
  json_puts(o, key);
  json_u64(o, v);
}

static void arg_hex(json_buf *o, const char *key, uint64_t v) {
  json_puts(o, key);
  json_hex_string(o, v);
}

/* ---- metadata ---------------------------------------------------------- */

static void meta_name(trace_format *f, const char *what, int pid, int64_t tid, uint64_t ts,
                      const char *name) {
  begin_event(f, "M", what, NULL, pid, tid, ts);
  json_puts(f->out, ",\"args\":{\"name\":");
  json_string(f->out, name);
  json_puts(f->out, "}");
  end_event(f);
}

static void meta_sort(trace_format *f, const char *what, int pid, int64_t tid, uint64_t ts,
                      int64_t index) {
  begin_event(f, "M", what, NULL, pid, tid, ts);
  json_puts(f->out, ",\"args\":{\"sort_index\":");
  json_i64(f->out, index);
  json_puts(f->out, "}");
  end_event(f);
}

static void process_name(trace_format *f, int pid, uint64_t ts) {
  char name[48];
  if (pid == TRACE_HOST_PID)
    snprintf(name, sizeof name, "host memory (CUPTI)");
  else
    snprintf(name, sizeof name, "GPU %d", pid - 1);
  meta_name(f, "process_name", pid, pid, ts, name);
  meta_sort(f, "process_sort_index", pid, pid, ts, pid);
  f->pid_named[pid] |= 1;
}

void trace_format_metadata(trace_format *f, uint64_t ts_ns) {
  char name[TRACE_TRACK_NAME_MAX];
  for (size_t i = 0; i < f->npools; i++) {
    trace_pool *p = &f->pools[i];
    int pid = trace_pid_of_device(p->info.device);
    if (!(f->pid_named[pid] & 1))
      process_name(f, pid, ts_ns);
    snprintf(name, sizeof name, "%s (%s, %s%s)", p->label, p->info.backend, p->info.strategy,
             p->live ? "" : ", destroyed");
    meta_name(f, "thread_name", pid, pool_tid(p), ts_ns, name);
    meta_sort(f, "thread_sort_index", pid, pool_tid(p), ts_ns, pool_tid(p));
    snprintf(name, sizeof name, "%s device calls", p->label);
    meta_name(f, "thread_name", pid, calls_tid(p), ts_ns, name);
    meta_sort(f, "thread_sort_index", pid, calls_tid(p), ts_ns, calls_tid(p));
  }
}

/* ---- counters -------------------------------------------------------------- */

static void memory_counter(trace_format *f, const trace_pool *p, uint64_t ts, uint64_t allocated,
                           uint64_t reserved, uint64_t requested) {
  char name[TRACE_TRACK_NAME_MAX];
  snprintf(name, sizeof name, "%s memory", p->label);
  begin_event(f, "C", name, NULL, trace_pid_of_device(p->info.device), pool_tid(p), ts);
  json_buf *o = f->out;
  arg_u64(o, ",\"args\":{\"allocated\":", allocated);
  arg_u64(o, ",\"reserved\":", reserved);
  arg_u64(o, ",\"free_in_pool\":", reserved > allocated ? reserved - allocated : 0);
  /* Requested bytes are bytes of allocated blocks. The running figure of a
   * segment event's sample exceeds them where a free it depends on was
   * overwritten before the trace read it, or fell outside the window. */
  arg_u64(o, ",\"requested\":", requested < allocated ? requested : allocated);
  json_putc(o, '}');
  end_event(f);
}

static void counter_record(trace_format *f, const counter_sample *cs, uint64_t ts) {
  trace_pool *p = trace_format_find_pool(f, cs->pool_id);
  if (!p)
    return;
  p->requested = cs->requested;
  p->have_requested = 1;
  memory_counter(f, p, ts, cs->allocated, cs->reserved, cs->requested);
  char name[TRACE_TRACK_NAME_MAX];
  snprintf(name, sizeof name, "%s allocations", p->label);
  begin_event(f, "C", name, NULL, trace_pid_of_device(p->info.device), pool_tid(p), ts);
  arg_u64(f->out, ",\"args\":{\"from_cache\":", cs->from_cache);
  arg_u64(f->out, ",\"from_device\":", cs->from_device);
  json_putc(f->out, '}');
  end_event(f);
}

/* ---- pool events ------------------------------------------------------------ */

static void alloc_args(json_buf *o, const pool_event *ev) {
  arg_hex(o, ",\"args\":{\"address\":", ev->addr);
  arg_u64(o, ",\"size\":", ev->size);
  arg_u64(o, ",\"requested\":", ev->requested);
  arg_hex(o, ",\"stream\":", ev->stream);
}

static void alloc_name(char *dst, size_t size, const trace_pool *p) {
  snprintf(dst, size, "%s alloc", p->label);
}

/* Closes the open allocation at addr (from any pool) with an "e". */
static void close_alloc(trace_format *f, uint64_t addr, uint64_t ts, int free_recorded,
                        int deferred) {
  uint64_t index;
  if (!trace_live_set_take(&f->live, SPACE_POOL, addr, &index) || index >= f->npools)
    return;
  const trace_pool *p = &f->pools[index];
  char name[TRACE_TRACK_NAME_MAX];
  alloc_name(name, sizeof name, p);
  begin_event(f, "e", name, "alloc", trace_pid_of_device(p->info.device), pool_tid(p), ts);
  arg_hex(f->out, ",\"id\":", addr);
  json_puts(f->out, free_recorded ? (deferred ? ",\"args\":{\"deferred\":1}" : ",\"args\":{}")
                                  : ",\"args\":{\"free_not_recorded\":1}");
  end_event(f);
}

static void pool_alloc(trace_format *f, trace_pool *p, const pool_event *ev, uint64_t ts) {
  p->requested += ev->requested;
  uint64_t ignored;
  /* The same address open twice: its free was lost (overwritten while this
   * trace was read). Close the old bar here so the bars never nest. */
  if (trace_live_set_get(&f->live, SPACE_POOL, ev->addr, &ignored))
    close_alloc(f, ev->addr, ts, 0, 0);
  if (trace_live_set_put(&f->live, SPACE_POOL, ev->addr, (uint64_t)(p - f->pools)) != 0) {
    f->out->failed = 1;
    return;
  }
  char name[TRACE_TRACK_NAME_MAX];
  alloc_name(name, sizeof name, p);
  begin_event(f, "b", name, "alloc", trace_pid_of_device(p->info.device), pool_tid(p), ts);
  arg_hex(f->out, ",\"id\":", ev->addr);
  alloc_args(f->out, ev);
  json_puts(f->out,
            ev->flags & EVF_FROM_DEVICE ? ",\"source\":\"device\"}" : ",\"source\":\"cache\"}");
  end_event(f);
}

static void pool_free(trace_format *f, trace_pool *p, const pool_event *ev, uint64_t ts) {
  p->requested -= ev->requested < p->requested ? ev->requested : p->requested;
  int deferred = (ev->flags & EVF_DEFERRED) != 0;
  uint64_t ignored;
  if (trace_live_set_get(&f->live, SPACE_POOL, ev->addr, &ignored)) {
    close_alloc(f, ev->addr, ts, 1, deferred);
    return;
  }
  /* Allocated before the trace's window: a free without its bar. */
  begin_event(f, "i", "free", "alloc", trace_pid_of_device(p->info.device), pool_tid(p), ts);
  json_puts(f->out, ",\"s\":\"t\"");
  alloc_args(f->out, ev);
  arg_u64(f->out, ",\"deferred\":", (uint64_t)deferred);
  json_putc(f->out, '}');
  end_event(f);
}

static void pool_instant(trace_format *f, trace_pool *p, const char *name, const pool_event *ev,
                         uint64_t ts) {
  begin_event(f, "i", name, "pool", trace_pid_of_device(p->info.device), pool_tid(p), ts);
  json_buf *o = f->out;
  json_puts(o, ",\"s\":\"t\"");
  if (ev->type == EV_FREE_COMPLETED) {
    arg_hex(o, ",\"args\":{\"address\":", ev->addr);
    arg_u64(o, ",\"size\":", ev->size);
  } else {
    arg_u64(o, ",\"args\":{\"released\":", ev->size);
    arg_u64(o, ",\"reserved_after\":", ev->a);
    arg_u64(o, ",\"allocated_after\":", ev->b);
  }
  arg_hex(o, ",\"stream\":", ev->stream);
  json_putc(o, '}');
  end_event(f);
}

/* A time (ns after the base) as µs on a grid of 1/1024 µs, the nearest grid
 * point: k / 1024 written out exactly (at most 10 decimals, zeros trimmed). */
static uint64_t grid_of(uint64_t ns) {
  return ns < (UINT64_MAX >> 8) ? (ns * 128 + 62) / 125 : ns / 125 * 128;
}

static void grid_us(json_buf *o, uint64_t k) {
  json_u64(o, k >> 10);
  uint64_t frac = (k & 1023) * 9765625ull; /* / 10^10 */
  if (!frac)
    return;
  char digits[11];
  int n = 0;
  for (uint64_t scale = 1000000000ull; scale && frac; scale /= 10) {
    digits[n++] = (char)('0' + frac / scale);
    frac %= scale;
  }
  json_putc(o, '.');
  json_put(o, digits, (size_t)n);
}

/* A device call's ts and dur. Viewers read JSON numbers as doubles and draw
 * an X event up to ts + dur (speedscope after subtracting the track's first
 * ts): with 3-decimal texts those sums can land a hair past the next call's
 * ts, and the next call, which begins where this one ends, is drawn nested
 * inside it. On the 1/1024 µs grid every such sum and difference is exact in
 * double, so calls that touch in nanoseconds touch in every viewer. */
static void device_call_times(json_buf *o, uint64_t start_ns, uint64_t end_ns) {
  uint64_t ks = grid_of(start_ns), ke = grid_of(end_ns);
  json_puts(o, ",\"ts\":");
  grid_us(o, ks);
  json_puts(o, ",\"dur\":");
  grid_us(o, ke - ks);
}

/* A device call as a complete event ending at the record's time. Two calls
 * of one pool that overlapped (on different streams) are drawn one after the
 * other so that the track stays properly nested; args keep the real time. */
static void segment_call(trace_format *f, trace_pool *p, const pool_event *ev, uint64_t ts) {
  uint64_t start = ts > ev->dur_ns ? ts - ev->dur_ns : 0;
  if (start < p->calls_end_ns)
    start = p->calls_end_ns;
  if (start < f->base_ns)
    start = f->base_ns;
  if (start > ts)
    start = ts;
  p->calls_end_ns = ts;
  const char *name = ev->flags & EVF_PAGES
                         ? (ev->type == EV_SEGMENT_ALLOC ? "pages map" : "pages unmap")
                         : (ev->type == EV_SEGMENT_ALLOC ? "segment alloc" : "segment free");
  open_event(f, "X", name, "device", trace_pid_of_device(p->info.device), calls_tid(p));
  json_buf *o = f->out;
  device_call_times(o, start - f->base_ns, ts - f->base_ns);
  arg_hex(o, ",\"args\":{\"address\":", ev->addr);
  arg_u64(o, ",\"size\":", ev->size);
  arg_hex(o, ",\"stream\":", ev->stream);
  arg_u64(o, ",\"device_call_ns\":", ev->dur_ns);
  arg_u64(o, ",\"reserved_after\":", ev->a);
  arg_u64(o, ",\"allocated_after\":", ev->b);
  json_puts(o, ev->flags & EVF_LARGE ? ",\"pool\":\"large\"}" : ",\"pool\":\"small\"}");
  end_event(f);
  /* The memory counter moves at every segment change. Requested bytes are
   * the latest regular sample's, moved by the allocations and frees recorded
   * since; before any sample they are unknown and no sample is written. */
  if (p->have_requested)
    memory_counter(f, p, ts, ev->b, ev->a, p->requested);
}

/* OOM: size, requested; a = free in pool, b = largest free block,
 * addr = reserved bytes, stream = device free bytes (see pool/reclaim.c);
 * the stream that asked is its ring's. No address: nothing was allocated. */
static void oom(trace_format *f, trace_pool *p, const pool_event *ev, uint64_t stream,
                uint64_t ts) {
  char name[TRACE_TRACK_NAME_MAX];
  snprintf(name, sizeof name, "OOM %s", p->label);
  begin_event(f, "i", name, "oom", trace_pid_of_device(p->info.device), pool_tid(p), ts);
  json_buf *o = f->out;
  json_puts(o, ",\"s\":\"g\"");
  arg_u64(o, ",\"args\":{\"size\":", ev->oom.segment_size);
  arg_u64(o, ",\"requested\":", ev->oom.requested_bytes);
  arg_hex(o, ",\"stream\":", stream);
  arg_u64(o, ",\"free_in_pool\":", ev->oom.free_in_pool);
  arg_u64(o, ",\"largest_free_block\":", ev->oom.largest_free);
  arg_u64(o, ",\"reserved\":", ev->oom.reserved_bytes);
  arg_u64(o, ",\"device_free\":", ev->oom.device_free);
  json_putc(o, '}');
  end_event(f);
}

static void pool_record(trace_format *f, const trace_record *r) {
  if (r->tag >= f->npools)
    return;
  trace_pool *p = &f->pools[r->tag];
  const pool_event *ev = &r->u.ev;
  switch (ev->type) {
  case EV_ALLOC: { /* its repeated lifetimes first, then itself and its free if said */
    pool_event alloc = event_alloc_part(ev), freed = event_freed_part(ev);
    for (unsigned i = 0; i < ev->repeats; i++) {
      pool_alloc(f, p, &alloc, r->ts_ns);
      pool_free(f, p, &freed, r->ts_ns);
    }
    pool_alloc(f, p, &alloc, r->ts_ns);
    if (ev->flags & EVF_FREED) /* and its free, in the same record */
      pool_free(f, p, &freed, r->ts_ns);
    break;
  }
  case EV_FREE:
    pool_free(f, p, ev, r->ts_ns);
    break;
  case EV_FREE_COMPLETED:
    pool_instant(f, p, "free completed", ev, r->ts_ns);
    break;
  case EV_SEGMENT_ALLOC:
  case EV_SEGMENT_FREE:
    segment_call(f, p, ev, r->ts_ns);
    break;
  case EV_EMPTY_CACHE:
    pool_instant(f, p, "empty_cache", ev, r->ts_ns);
    break;
  case EV_GC:
    pool_instant(f, p, "garbage_collection", ev, r->ts_ns);
    break;
  case EV_OOM:
    oom(f, p, ev, r->ring_stream, r->ts_ns);
    break;
  default:
    break;
  }
}

/* ---- CUPTI ------------------------------------------------------------------ */

static void cupti_name(char *dst, size_t size, uint64_t kind) {
  const char *k = kind < CUPTI_MEMORY_KINDS ? cupti_memory_kind_name((int)kind) : NULL;
  snprintf(dst, size, "CUDA %s alloc", k ? k : "unknown");
}

static void cupti_track_names(trace_format *f, int pid, uint64_t ts) {
  if (!(f->pid_named[pid] & 1))
    process_name(f, pid, ts);
  if (!(f->pid_named[pid] & 2)) {
    meta_name(f, "thread_name", pid, cupti_tid(pid), ts, "CUDA allocations (CUPTI)");
    meta_sort(f, "thread_sort_index", pid, cupti_tid(pid), ts, cupti_tid(pid));
    f->pid_named[pid] |= 2;
  }
}

/* CUPTI records: a = memory kind, b = device (-1: none). An allocation's
 * value in the open set packs its kind and pid so the "e" matches the "b". */
static void cupti_record(trace_format *f, const trace_record *r) {
  const pool_event *ev = &r->u.ev;
  int pid = trace_pid_of_device((int64_t)ev->b);
  char name[64];
  if (ev->type == EV_ALLOC) {
    cupti_track_names(f, pid, r->ts_ns);
    uint64_t old;
    if (trace_live_set_take(&f->live, SPACE_CUPTI, ev->addr, &old)) {
      cupti_name(name, sizeof name, old & 0xff);
      begin_event(f, "e", name, "cuda", (int)(old >> 8), cupti_tid((int)(old >> 8)), r->ts_ns);
      arg_hex(f->out, ",\"id\":", ev->addr);
      json_puts(f->out, ",\"args\":{\"free_not_recorded\":1}");
      end_event(f);
    }
    if (trace_live_set_put(&f->live, SPACE_CUPTI, ev->addr,
                           ((uint64_t)pid << 8) | (ev->a & 0xff)) != 0) {
      f->out->failed = 1;
      return;
    }
    cupti_name(name, sizeof name, ev->a);
    begin_event(f, "b", name, "cuda", pid, cupti_tid(pid), r->ts_ns);
    arg_hex(f->out, ",\"id\":", ev->addr);
    arg_hex(f->out, ",\"args\":{\"address\":", ev->addr);
    arg_u64(f->out, ",\"size\":", ev->size);
    arg_hex(f->out, ",\"stream\":", ev->stream);
    json_puts(f->out, ev->flags & CUPTI_EVF_POOL ? ",\"owner\":\"pool\"" : ",\"owner\":\"other\"");
    arg_u64(f->out, ",\"async\":", (ev->flags & CUPTI_EVF_ASYNC) != 0);
    json_putc(f->out, '}');
    end_event(f);
  } else if (ev->type == EV_FREE) {
    uint64_t open;
    if (!trace_live_set_take(&f->live, SPACE_CUPTI, ev->addr, &open))
      return; /* allocated before the window (or before CUPTI attached) */
    cupti_name(name, sizeof name, open & 0xff);
    begin_event(f, "e", name, "cuda", (int)(open >> 8), cupti_tid((int)(open >> 8)), r->ts_ns);
    arg_hex(f->out, ",\"id\":", ev->addr);
    json_puts(f->out, ",\"args\":{}");
    end_event(f);
  }
}

void trace_format_record(trace_format *f, const trace_record *r) {
  switch (r->kind) {
  case TRACE_SRC_COUNTERS:
    counter_record(f, &r->u.cs, r->ts_ns);
    break;
  case TRACE_SRC_POOL:
    pool_record(f, r);
    break;
  case TRACE_SRC_CUPTI:
    cupti_record(f, r);
    break;
  }
}
