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

/* Whether page i of vmm segment seg is mapped for its blocks. */
static inline int page_mapped(const segment *seg, size_t i) {
  return seg->pages[i] && seg->pages[i] != PAGE_STALE;
}

/* Whether every page of seg under [addr, addr + len) is mapped (always true
 * for a plain segment). Under the segment's shard lock. */
static inline int pages_cover(const segment *seg, uintptr_t addr, size_t len) {
  if (!seg->pages || seg->nmapped == seg->npages)
    return 1;
  size_t first = (addr - seg->addr) / seg->page_size;
  size_t last = (addr + len - 1 - seg->addr) / seg->page_size;
  for (size_t i = first; i <= last; i++)
    if (!page_mapped(seg, i))
      return 0;
  return 1;
}

/* What the page operations of one slow-path call did, for the pool's
 * counters and events (emitted by the caller once no shard lock is held). */
typedef struct pages_work {
  size_t created, moved, released;  /* bytes: new pages, idle pages remapped, pages returned */
  uintptr_t mapped_at, unmapped_at; /* the first page mapped, and unmapped */
  uint64_t map_ns, unmap_ns;        /* time in create + map, and in unmap + release */
} pages_work;

/* A vmm segment of size bytes (a multiple of the page size): address space
 * only, no page mapped. */
gpupool_status pages_segment_create(gpupool *p, size_t size, int large, segment **out);
/* Unmaps and releases every page of seg (out of its shard, or never in
 * one) and frees its address range and the struct (not its blocks); returns
 * the bytes of pages released. */
size_t pages_segment_destroy(gpupool *p, segment *seg);

/* Maps every missing page of seg under [addr, addr + len), moving idle pages
 * from anywhere in the pool (not from that range) before creating new ones.
 * The range is a claimed block (shard_claim) or lies in one; the caller
 * holds no shard lock: each is taken here in turn, never across a device
 * call. GPUPOOL_ERR_OOM when the device has no page left for it. */
gpupool_status pages_back(gpupool *p, segment *seg, uintptr_t addr, size_t len, pages_work *w);

/* Returns the idle pages of every vmm segment of p to the device (w says
 * how many bytes); no shard lock held. */
void pages_release_idle(gpupool *p, pages_work *w);

#endif
