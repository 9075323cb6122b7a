/* torch_snapshot.h: a small pickle writer for PyTorch's memory snapshot. */
#include "torch_snapshot.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/array_grow.h"
#include "core/assert.h"

/* Pickle opcodes (protocol 2-4) used here. */
enum {
  OP_PROTO = 0x80,
  OP_STOP = '.',
  OP_MARK = '(',
  OP_EMPTY_DICT = '}',
  OP_EMPTY_LIST = ']',
  OP_SETITEMS = 'u',
  OP_APPENDS = 'e',
  OP_SHORT_BINUNICODE = 0x8c,
  OP_BINUNICODE = 'X',
  OP_BININT = 'J',
  OP_LONG1 = 0x8a,
  OP_NEWTRUE = 0x88,
  OP_NEWFALSE = 0x89,
  OP_TUPLE2 = 0x86,
};

typedef struct pbuf {
  unsigned char *data;
  size_t len, cap;
  int failed;
} pbuf;

static void put(pbuf *b, const void *p, size_t n) {
  if (b->failed)
    return;
  if (array_grow((void **)&b->data, &b->cap, b->len + n, 1, 4096) != 0) {
    b->failed = 1;
    return;
  }
  memcpy(b->data + b->len, p, n);
  b->len += n;
}

static void op(pbuf *b, int code) {
  unsigned char c = (unsigned char)code;
  put(b, &c, 1);
}

static void str(pbuf *b, const char *s) {
  size_t n = strlen(s);
  if (n < 256) {
    unsigned char h[2] = {OP_SHORT_BINUNICODE, (unsigned char)n};
    put(b, h, 2);
  } else {
    unsigned char h[5] = {OP_BINUNICODE, (unsigned char)n, (unsigned char)(n >> 8),
                          (unsigned char)(n >> 16), (unsigned char)(n >> 24)};
    put(b, h, 5);
  }
  put(b, s, n);
}

/* An int: BININT when it fits 32 bits, else LONG1 with 8 bytes. */
static void num(pbuf *b, int64_t v) {
  unsigned char h[10];
  uint64_t u = (uint64_t)v;
  if (v >= INT32_MIN && v <= INT32_MAX) {
    h[0] = OP_BININT;
    for (int i = 0; i < 4; i++)
      h[1 + i] = (unsigned char)(u >> (8 * i));
    put(b, h, 5);
  } else {
    h[0] = OP_LONG1;
    h[1] = 8;
    for (int i = 0; i < 8; i++)
      h[2 + i] = (unsigned char)(u >> (8 * i));
    put(b, h, 10);
  }
}

static void unum(pbuf *b, uint64_t v) {
  num(b, v > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)v);
}

static void key_num(pbuf *b, const char *k, uint64_t v) {
  str(b, k);
  unum(b, v);
}

static void key_str(pbuf *b, const char *k, const char *v) {
  str(b, k);
  str(b, v);
}

static void empty_list(pbuf *b, const char *k) {
  str(b, k);
  op(b, OP_EMPTY_LIST);
}

/* The part of [addr, addr + size) inside [from, to). */
typedef struct span {
  uint64_t addr, size;
} span;

static span clip(uint64_t addr, uint64_t size, uint64_t from, uint64_t to) {
  uint64_t lo = addr > from ? addr : from, hi = addr + size < to ? addr + size : to;
  return (span){lo, hi - lo};
}

/* Block bl as it lies in a segment [from, to): a free block of a vmm range
 * can reach over unmapped pages past the run of mapped ones the segment is;
 * only its part over the run is written. */
static void block(pbuf *b, const pool_block_info *bl, uint64_t from, uint64_t to) {
  span part = clip(bl->addr, bl->size, from, to);
  gp_assert_internal(!bl->requested || part.size == bl->size); /* a live block is mapped whole */
  op(b, OP_EMPTY_DICT);
  op(b, OP_MARK);
  key_num(b, "size", part.size);
  key_num(b, "requested_size", bl->requested);
  key_num(b, "address", part.addr);
  key_str(b, "state", bl->state);
  empty_list(b, "frames");
  op(b, OP_SETITEMS);
}

/* One segment dict: [addr, addr + size), tiled exactly by the parts of
 * blocks[0, n) that lie in it. PyTorch's requested_size of a segment: its
 * active blocks', pending frees included (the segment info's is the
 * allocated blocks'); a free block's requested is 0 (pool_view.h), so the
 * sum over all blocks is that. A live block lies whole in its segment. */
static void segment_dict(pbuf *b, int device, const pool_segment_info *info, int expandable,
                         uint64_t addr, uint64_t size, const pool_block_info *blocks, size_t n) {
  uint64_t requested = 0, allocated = 0, active = 0;
  for (size_t i = 0; i < n; i++) {
    requested += blocks[i].requested;
    if (blocks[i].requested) { /* allocated or pending (pool_view.h): active */
      active += blocks[i].size;
      allocated += strcmp(blocks[i].state, "active_allocated") ? 0 : blocks[i].size;
    }
  }
  op(b, OP_EMPTY_DICT);
  op(b, OP_MARK);
  key_num(b, "device", (uint64_t)(device < 0 ? 0 : device));
  key_num(b, "address", addr);
  key_num(b, "total_size", size);
  key_num(b, "allocated_size", allocated);
  key_num(b, "active_size", active);
  key_num(b, "requested_size", requested);
  key_num(b, "stream", info->stream);
  key_str(b, "segment_type", info->is_large ? "large" : "small");
  str(b, "segment_pool_id");
  num(b, 0);
  num(b, 0);
  op(b, OP_TUPLE2);
  str(b, "is_expandable");
  op(b, expandable ? OP_NEWTRUE : OP_NEWFALSE);
  empty_list(b, "frames");
  str(b, "blocks");
  op(b, OP_EMPTY_LIST);
  if (n) {
    op(b, OP_MARK);
    for (size_t i = 0; i < n; i++)
      block(b, &blocks[i], addr, addr + size);
    op(b, OP_APPENDS);
  }
  op(b, OP_SETITEMS);
}

/* A segment of the pool as PyTorch reports it: a plain one whole; a vmm
 * range (expandable segments) as one segment per run of mapped pages, as
 * PyTorch's snapshot() does, with the parts of its blocks over that run (a
 * free block can lie over mapped and unmapped pages; a live one is mapped
 * whole). Its unmapped address space is no memory and is left out. */
static void segment(pbuf *b, const pool_capture *c, const pool_capture_segment *s) {
  const pool_block_info *blocks = &c->blocks[s->first_block];
  if (!s->expandable) {
    segment_dict(b, c->device, &s->info, 0, s->info.addr, s->info.size, blocks, s->info.nblocks);
    return;
  }
  size_t i = 0; /* the first block not wholly before the run */
  for (size_t r = 0; r < s->nruns; r++) {
    const pool_capture_run *run = &c->runs[s->first_run + r];
    while (i < s->info.nblocks && blocks[i].addr + blocks[i].size <= run->addr)
      i++;
    size_t n = 0;
    while (i + n < s->info.nblocks && blocks[i + n].addr < run->addr + run->size)
      n++;
    segment_dict(b, c->device, &s->info, 1, run->addr, run->size, &blocks[i], n);
  }
}

static void entry(pbuf *b, const char *action, const pool_event *e, uint64_t addr, uint64_t size,
                  uint64_t stream) {
  op(b, OP_EMPTY_DICT);
  op(b, OP_MARK);
  key_str(b, "action", action);
  key_num(b, "addr", addr);
  key_num(b, "size", size);
  key_num(b, "stream", stream);
  key_num(b, "time_us", e->ts_ns / 1000);
  empty_list(b, "frames");
  if (e->type == EV_OOM)
    key_num(b, "device_free", e->oom.device_free);
  op(b, OP_SETITEMS);
}

/* The vmm ranges of the expandable pools on a device, by address: those
 * the captures hold and those their events reserved or released. A page
 * event is written with its range's stream, as PyTorch writes its
 * segment_map: the pool records it on the track of the stream whose call
 * moved the pages, but a viewer joins mapped runs of one stream only. */
typedef struct vmm_range {
  uint64_t addr, size, stream;
} vmm_range;

typedef struct range_index {
  vmm_range *r; /* by address */
  size_t n;
} range_index;

static int by_addr(const void *a, const void *b) {
  const vmm_range *x = a, *y = b;
  return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* -1 out of host memory. */
static int range_index_build(range_index *ix, const pool_capture *const *caps, size_t n,
                             int device) {
  size_t cap = 0;
  for (size_t i = 0; i < n; i++)
    if (caps[i]->device == device && caps[i]->expandable)
      cap += caps[i]->nsegs + caps[i]->nevents;
  *ix = (range_index){0};
  if (!cap)
    return 0;
  if (!(ix->r = malloc(cap * sizeof *ix->r)))
    return -1;
  for (size_t i = 0; i < n; i++) {
    const pool_capture *c = caps[i];
    if (c->device != device || !c->expandable)
      continue;
    for (size_t k = 0; k < c->nsegs; k++)
      ix->r[ix->n++] =
          (vmm_range){c->segs[k].info.addr, c->segs[k].info.size, c->segs[k].info.stream};
    for (size_t k = 0; k < c->nevents; k++) {
      const pool_event *e = &c->events[k];
      if ((e->type == EV_SEGMENT_ALLOC || e->type == EV_SEGMENT_FREE) && !(e->flags & EVF_PAGES))
        ix->r[ix->n++] = (vmm_range){e->addr, e->size, e->stream};
    }
  }
  qsort(ix->r, ix->n, sizeof *ix->r, by_addr);
  return 0;
}

/* The stream of the range holding addr; dflt where none does. */
static uint64_t range_stream(const range_index *ix, uint64_t addr, uint64_t dflt) {
  size_t lo = 0, hi = ix->n; /* the first range starting above addr */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (ix->r[mid].addr <= addr)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo > 0 && addr - ix->r[lo - 1].addr < ix->r[lo - 1].size ? ix->r[lo - 1].stream : dflt;
}

/* One ring event as trace entries (a free that did not wait on other
 * streams is requested and completed at once, as PyTorch records it). An
 * allocation's entries carry the bytes requested, as PyTorch's do (its
 * blocks' size is in segments). In an expandable pool (c), a vmm range's
 * reservation and release are no entries: its memory is its pages, whose
 * maps and unmaps (the range's release unmaps its last ones first) are
 * segment_map and segment_unmap, on the range's stream, as PyTorch's. */
static void trace_event(pbuf *b, const pool_event *e, const pool_capture *c,
                        const range_index *ranges) {
  int pages = (e->flags & EVF_PAGES) != 0;
  if (c->expandable && !pages && (e->type == EV_SEGMENT_ALLOC || e->type == EV_SEGMENT_FREE))
    return;
  switch (e->type) {
  case EV_ALLOC:
    entry(b, "alloc", e, e->addr, e->requested, e->stream);
    break;
  case EV_FREE:
    entry(b, "free_requested", e, e->addr, e->requested, e->stream);
    if (!(e->flags & EVF_DEFERRED))
      entry(b, "free_completed", e, e->addr, e->requested, e->stream);
    break;
  case EV_FREE_COMPLETED:
    entry(b, "free_completed", e, e->addr, e->requested, e->stream);
    break;
  case EV_SEGMENT_ALLOC:
    if (pages)
      entry(b, "segment_map", e, e->addr, e->size, range_stream(ranges, e->addr, e->stream));
    else
      entry(b, "segment_alloc", e, e->addr, e->size, e->stream);
    break;
  case EV_SEGMENT_FREE:
    if (pages)
      entry(b, "segment_unmap", e, e->addr, e->size, range_stream(ranges, e->addr, e->stream));
    else
      entry(b, "segment_free", e, e->addr, e->size, e->stream);
    break;
  case EV_OOM: /* PyTorch keeps the device's free bytes in addr */
    entry(b, "oom", e, e->oom.device_free, e->oom.requested_bytes, 0);
    break;
  default: /* empty_cache and GC passes show as the segment frees they made */
    break;
  }
}

/* Events of every capture on `device`, merged by time (each capture's own
 * order kept). */
static void device_trace(pbuf *b, const pool_capture *const *caps, size_t n, int device) {
  size_t *pos = calloc(n + 1, sizeof *pos);
  range_index ranges;
  if (!pos || range_index_build(&ranges, caps, n, device) != 0) {
    free(pos);
    b->failed = 1;
    return;
  }
  /* From the time every pool of the device has all its events: pools share
   * the device's addresses, so one pool's older events could meet another's
   * missing ones. */
  uint64_t since = 0;
  for (size_t i = 0; i < n; i++)
    if (caps[i]->device == device && !caps[i]->truncated && caps[i]->events_since_ns > since)
      since = caps[i]->events_since_ns;
  for (size_t i = 0; i < n; i++)
    while (pos[i] < caps[i]->nevents && caps[i]->events[pos[i]].ts_ns < since)
      pos[i]++;
  op(b, OP_EMPTY_LIST);
  op(b, OP_MARK);
  for (;;) {
    size_t best = n;
    for (size_t i = 0; i < n; i++) {
      const pool_capture *c = caps[i];
      if (c->device != device || c->truncated || pos[i] >= c->nevents)
        continue;
      if (best == n || pool_capture_goes_first(&c->events[pos[i]], &caps[best]->events[pos[best]]))
        best = i;
    }
    if (best == n)
      break;
    trace_event(b, &caps[best]->events[pos[best]++], caps[best], &ranges);
  }
  op(b, OP_APPENDS);
  free(ranges.r);
  free(pos);
}

char *torch_snapshot_pickle(const pool_capture *const *caps, size_t n, size_t *len) {
  pbuf b = {0};
  unsigned char proto[2] = {OP_PROTO, 4};
  put(&b, proto, 2);
  op(&b, OP_EMPTY_DICT);
  op(&b, OP_MARK);
  str(&b, "segments");
  op(&b, OP_EMPTY_LIST);
  op(&b, OP_MARK);
  int ndev = 0;
  for (size_t i = 0; i < n; i++) {
    const pool_capture *c = caps[i];
    if (c->device + 1 > ndev)
      ndev = c->device + 1;
    for (size_t s = 0; s < c->nsegs; s++)
      segment(&b, c, &c->segs[s]);
  }
  op(&b, OP_APPENDS);
  str(&b, "device_traces");
  op(&b, OP_EMPTY_LIST);
  op(&b, OP_MARK);
  for (int d = 0; d < ndev; d++)
    device_trace(&b, caps, n, d);
  op(&b, OP_APPENDS);
  op(&b, OP_SETITEMS);
  op(&b, OP_STOP);
  if (b.failed) {
    free(b.data);
    return NULL;
  }
  *len = b.len;
  return (char *)b.data;
}
