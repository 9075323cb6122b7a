/* Pages of vmm segments (expandable_segments:True). A large segment is an
 * address range; physical pages are mapped into it only where blocks need
 * them. Before the pool asks the device for a new page it moves an idle one
 * (a mapped page wholly under a free block, oldest free first) to where it
 * is needed, so what the pool holds follows what is allocated rather than
 * what was ever split. Callers hold p->slow_lock. */
#ifndef GPUPOOL_PAGES_H
#define GPUPOOL_PAGES_H

#include "pool_internal.h"

/* A page slot whose handle moved to another block while queued work on its
 * stream may still use the old address: the old mapping stays until the
 * stream's fence passes it (pages.c), and the slot holds this marker, which
 * no block may use. */
extern char pages_stale_marker;
#define PAGE_STALE ((void *)&pages_stale_marker)

/* Handles per chunk of a segment's handle table (types.h: segment.pages):
 * 1 GiB of address space with 2 MiB pages, 4 KiB of handles; the directory
 * of a range as large as a 1 PiB device is 8 MiB. */
#define PAGE_CHUNK_SHIFT 9
#define PAGE_CHUNK       ((size_t)1 << PAGE_CHUNK_SHIFT)

/* The handle of page i of vmm segment seg: NULL where none (its chunk not
 * made yet included), PAGE_STALE, or the page's. */
static inline void *page_handle(const segment *seg, size_t i) {
  void **chunk = seg->pages[i >> PAGE_CHUNK_SHIFT];
  return chunk ? chunk[i & (PAGE_CHUNK - 1)] : NULL;
}

/* Sets page i's handle; its chunk exists (pages_back made it before the
 * page was mapped, and only a mapped page's slot changes otherwise). */
static inline void page_handle_set(segment *seg, size_t i, void *h) {
  gp_assert_internal(seg->pages[i >> PAGE_CHUNK_SHIFT]);
  seg->pages[i >> PAGE_CHUNK_SHIFT][i & (PAGE_CHUNK - 1)] = h;
}

/* Whether page i of vmm segment seg is mapped for its blocks: its bit in
 * seg->mapped, kept with seg->pages (a handle, not PAGE_STALE). */
static inline int page_mapped(const segment *seg, size_t i) {
  return (seg->mapped[i / 64] >> (i % 64)) & 1;
}

static inline void page_set_mapped(segment *seg, size_t i, int on) {
  if (on)
    seg->mapped[i / 64] |= (uint64_t)1 << (i % 64);
  else
    seg->mapped[i / 64] &= ~((uint64_t)1 << (i % 64));
}

/* The page of vmm segment seg under address a: a shift, not a division,
 * on the hot path (pages_cover for every allocation); page sizes are
 * powers of two (the CUDA backend refuses any other). */
static inline size_t page_of(const segment *seg, uintptr_t a) {
  return (a - seg->addr) >> seg->page_shift;
}

/* How many pages of seg in [first, last] are mapped. */
static inline size_t pages_mapped_in(const segment *seg, size_t first, size_t last) {
  size_t n = 0;
  for (size_t w = first / 64; w <= last / 64; w++) {
    uint64_t bits = seg->mapped[w];
    if (w == first / 64)
      bits &= ~(uint64_t)0 << (first % 64);
    if (w == last / 64 && last % 64 != 63)
      bits &= ((uint64_t)1 << (last % 64 + 1)) - 1;
    n += (size_t)__builtin_popcountll(bits);
  }
  return n;
}

/* The first page at or after i, up to last, that is mapped (want 1) or not
 * (want 0); last + 1 when none. */
static inline size_t pages_find(const segment *seg, size_t i, size_t last, int want) {
  while (i <= last) {
    uint64_t bits = seg->mapped[i / 64];
    if (!want)
      bits = ~bits;
    bits &= ~(uint64_t)0 << (i % 64);
    if (bits) {
      size_t at = i / 64 * 64 + (size_t)__builtin_ctzll(bits);
      return at <= last ? at : last + 1;
    }
    i = (i / 64 + 1) * 64;
  }
  return last + 1;
}

/* Whether every page of seg in [first, last] is mapped: pages_find(seg,
 * first, last, 0) > last, a mask per word where that asks for the first
 * page not mapped (most windows lie in one word). */
static inline int pages_all_mapped(const segment *seg, size_t first, size_t last) {
  size_t w = first / 64, end = last / 64;
  uint64_t from = ~(uint64_t)0 << (first % 64);
  for (; w < end; w++, from = ~(uint64_t)0)
    if (~seg->mapped[w] & from)
      return 0;
  return !(~seg->mapped[end] & from & (~(uint64_t)0 >> (63 - last % 64)));
}

/* Whether every page of vmm segment seg under [addr, addr + len) is
 * mapped. */
static inline int pages_window_mapped(const segment *seg, uintptr_t addr, size_t len) {
  return pages_all_mapped(seg, page_of(seg, addr), page_of(seg, addr + len - 1));
}

/* Whether every page of seg under [addr, addr + len) is mapped (always true
 * for a plain segment). Under the segment's shard lock. */
static inline int pages_cover(const segment *seg, uintptr_t addr, size_t len) {
  return !seg->pages || seg->nmapped == seg->npages || pages_window_mapped(seg, addr, len);
}

/* The longest stretch of [addr, addr + len) (in vmm segment seg) over
 * mapped pages, in bytes. */
size_t pages_longest_mapped(const segment *seg, uintptr_t addr, size_t len);
/* The stretches of [addr, addr + len) (in vmm segment seg) over mapped
 * pages: their total bytes, and the longest's in *longest. */
size_t pages_mapped_stretches(const segment *seg, uintptr_t addr, size_t len, size_t *longest);
/* What a free block b holds ready for a request: all of it in a plain
 * segment; in a vmm segment only its bytes over mapped pages (returned; the
 * longest stretch in *longest). An expandable segment's free block spans
 * address range no page backs, which is neither reserved nor usable without
 * a device call. */
static inline size_t free_block_mapped(const block *b, size_t *longest) {
  if (!b->seg->pages)
    return *longest = b->size;
  return pages_mapped_stretches(b->seg, b->addr, b->size, longest);
}
/* block.mapped_run's exact value for free block b of a vmm segment: its
 * longest stretch over mapped pages, with bit 0 set unless that is all of
 * b. */
static inline size_t mapped_run_exact(const block *b) {
  size_t longest = pages_longest_mapped(b->seg, b->addr, b->size);
  return longest | (longest != b->size);
}
/* Whether free block b of a vmm segment is known to have every page under
 * it mapped (block.mapped_run's bit 0 clear). */
static inline int mapped_run_full(const block *b) {
  return !(b->mapped_run & 1);
}
/* The least of mapped_run value run and size, a part of the block that run
 * is for: a bound for the part, full only where the whole was. */
static inline size_t mapped_run_cap(size_t run, size_t size) {
  size |= run & 1;
  return run < size ? run : size;
}

/* What the page operations of one slow-path call did, for the pool's
 * counters, and whom to tell of each run of pages mapped or unmapped (the
 * caller's events). */
typedef struct pages_work {
  size_t created, moved, released; /* bytes: new pages, idle pages remapped, pages returned */
  size_t unmapped;                 /* pages unmapped (a move's old mappings, released pages) */
  /* Called for each run of neighbouring pages of one segment unmapped
   * (mapped 0) or mapped (1), right after its device call (ns: its time; 0
   * for a page whose old mapping goes once the streams pass it), with no
   * shard lock held; NULL: nobody is told. */
  void (*pages_changed)(void *ctx, int mapped, uintptr_t addr, size_t bytes, uint64_t ns);
  void *ctx;
  /* pages_back: the bytes of new pages it may create (memory_fraction's cap
   * less what the pool holds; SIZE_MAX: no cap), and whether that refused
   * pages the block needed (then GPUPOOL_ERR_OOM). */
  size_t may_create;
  int limit_refused;
} pages_work;

/* A vmm segment of size bytes (a multiple of the page size): address space
 * only, no page mapped; GPUPOOL_ERR_OOM when the backend has no address
 * range that large left (no memory is taken here). */
gpupool_status pages_segment_create(gpupool *p, size_t size, int large, segment **out);
/* Unmaps and releases every page of seg (out of its shard, or never in
 * one), each run of pages unmapped told to w (NULL: none); returns the
 * bytes of pages released. The range stays reserved. */
size_t pages_segment_release(gpupool *p, segment *seg, pages_work *w);
/* pages_segment_release, untold, then frees seg's address range and the
 * struct (not its blocks); returns the bytes of pages released. */
size_t pages_segment_destroy(gpupool *p, segment *seg);

/* Maps every missing page under claimed block b (shard_claim), moving idle
 * pages from anywhere in the pool (not from b) before creating new ones; the
 * free blocks that share b's first or last page learn of their new pages
 * (block.mapped_run). The caller holds no shard lock: each is taken here in
 * turn, never across a device call. GPUPOOL_ERR_OOM when the device has no
 * page left for it, or when w->may_create leaves no room for the pages that
 * moving idle ones does not cover. */
gpupool_status pages_back(gpupool *p, block *b, pages_work *w);

/* Returns the idle pages of every vmm segment of p to the device (w says
 * how many bytes); no shard lock held. */
void pages_release_idle(gpupool *p, pages_work *w);

#endif
