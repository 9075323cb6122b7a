/* torch_snapshot.h: a small pickle writer for PyTorch's memory snapshot. */
#include "torch_snapshot.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + n)
      cap *= 2;
    unsigned char *d = realloc(b->data, cap);
    if (!d) {
      b->failed = 1;
      return;
    }
    b->data = d;
    b->cap = cap;
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

static void block(pbuf *b, const pool_block_info *bl) {
  op(b, OP_EMPTY_DICT);
  op(b, OP_MARK);
  key_num(b, "size", bl->size);
  key_num(b, "requested_size", bl->requested);
  key_num(b, "address", bl->addr);
  key_str(b, "state", bl->state);
  empty_list(b, "frames");
  op(b, OP_SETITEMS);
}

static void segment(pbuf *b, const pool_capture *c, const pool_capture_segment *s) {
  /* PyTorch's requested_size of a segment: its active blocks', pending frees
   * included (the segment info's is the allocated blocks'); a free block's
   * requested is 0 (pool_view.h), so the sum over all blocks is that. */
  uint64_t requested = 0;
  for (size_t i = 0; i < s->info.nblocks; i++)
    requested += c->blocks[s->first_block + i].requested;
  op(b, OP_EMPTY_DICT);
  op(b, OP_MARK);
  key_num(b, "device", (uint64_t)(c->device < 0 ? 0 : c->device));
  key_num(b, "address", s->info.addr);
  key_num(b, "total_size", s->info.size);
  key_num(b, "allocated_size", s->info.allocated);
  key_num(b, "active_size", s->info.active);
  key_num(b, "requested_size", requested);
  key_num(b, "stream", s->info.stream);
  key_str(b, "segment_type", s->info.is_large ? "large" : "small");
  str(b, "segment_pool_id");
  num(b, 0);
  num(b, 0);
  op(b, OP_TUPLE2);
  str(b, "is_expandable");
  op(b, s->expandable ? OP_NEWTRUE : OP_NEWFALSE);
  empty_list(b, "frames");
  str(b, "blocks");
  op(b, OP_EMPTY_LIST);
  if (s->info.nblocks) {
    op(b, OP_MARK);
    for (size_t i = 0; i < s->info.nblocks; i++)
      block(b, &c->blocks[s->first_block + i]);
    op(b, OP_APPENDS);
  }
  op(b, OP_SETITEMS);
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

/* One ring event as trace entries (a free that did not wait on other
 * streams is requested and completed at once, as PyTorch records it). An
 * allocation's entries carry the bytes requested, as PyTorch's do (its
 * blocks' size is in segments). */
static void trace_event(pbuf *b, const pool_event *e) {
  int pages = (e->flags & EVF_PAGES) != 0;
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
    entry(b, pages ? "segment_map" : "segment_alloc", e, e->addr, e->size, e->stream);
    break;
  case EV_SEGMENT_FREE:
    entry(b, pages ? "segment_unmap" : "segment_free", e, e->addr, e->size, e->stream);
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
  if (!pos) {
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
    trace_event(b, &caps[best]->events[pos[best]++]);
  }
  op(b, OP_APPENDS);
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
