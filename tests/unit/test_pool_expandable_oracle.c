/* Placement over mapped pages (expandable segments) against an oracle kept
 * here, written the straightforward way: before every gpupool_malloc of a
 * random sequence of mallocs, frees and empty_cache calls, the oracle walks
 * the shard's segments, sorts the free blocks that fit by (size, address),
 * and counts unmapped pages page by page, to say where the pool must place
 * the request (the policy of docs/pool.md: the best fit when its pages are
 * mapped; else the first block, smallest first, with a placement over mapped
 * pages only, at its start, its end or a run of mapped pages inside it; else
 * the placement that needs the fewest unmapped pages). The address the pool
 * returns must be that one, every time. It also checks that each free
 * block's mapped_run, which the pool's search trusts to skip blocks, is at
 * least the longest stretch of the block over mapped pages (and, where its
 * bit 0 says every page is mapped, that they are), and the shard's count of
 * free blocks. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "pool/shard.h"
#include "pool/sizeclass.h"

#define MiB ((size_t)1 << 20)

static uint64_t rng;
static uint64_t rnd(uint64_t n) {
  rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
  return (rng >> 33) % n;
}

static int mapped(const segment *seg, size_t page) {
  return (int)((seg->mapped[page / 64] >> (page % 64)) & 1);
}

/* The unmapped pages a request of rounded bytes placed at `at` in free
 * block b needs; SIZE_MAX where it does not fit there. It takes its own
 * size when the rest is left as a free block, else all of b from at. */
static size_t missing(const block *b, uintptr_t at, size_t rounded) {
  const segment *seg = b->seg;
  uintptr_t end = b->addr + b->size;
  if (at < b->addr || at > end || end - at < rounded)
    return SIZE_MAX;
  size_t rest = end - at - rounded;
  int split = seg->large ? rest > SMALL_SIZE : rest >= MIN_BLOCK;
  size_t len = split ? rounded : end - at, n = 0;
  for (uintptr_t a = at; a < at + len;
       a = (a - seg->addr) / seg->page_size * seg->page_size + seg->page_size + seg->addr)
    n += !mapped(seg, (a - seg->addr) / seg->page_size);
  return n;
}

/* The placements tried in b, in order: its start, its end, then the start
 * and the end of each run of mapped pages that b's pages hold, by address. */
static size_t placements(const block *b, size_t rounded, uintptr_t *out, size_t cap) {
  const segment *seg = b->seg;
  size_t ps = seg->page_size, n = 0;
  size_t first = (b->addr - seg->addr) / ps, last = (b->addr + b->size - 1 - seg->addr) / ps;
  out[n++] = b->addr;
  out[n++] = b->addr + b->size - rounded;
  for (size_t i = first; i <= last && n + 2 <= cap; i++) {
    if (!mapped(seg, i) || (i > first && mapped(seg, i - 1)))
      continue;
    size_t j = i;
    while (j <= last && mapped(seg, j))
      j++;
    out[n++] = seg->addr + i * ps;
    out[n++] = seg->addr + j * ps - rounded;
  }
  return n;
}

/* The longest stretch of free block b over mapped pages, in bytes. */
static size_t longest_mapped(const block *b) {
  const segment *seg = b->seg;
  size_t best = 0, run = 0;
  for (uintptr_t a = b->addr; a < b->addr + b->size;) {
    uintptr_t page_end =
        (a - seg->addr) / seg->page_size * seg->page_size + seg->page_size + seg->addr;
    uintptr_t to = page_end < b->addr + b->size ? page_end : b->addr + b->size;
    run = mapped(seg, (a - seg->addr) / seg->page_size) ? run + (to - a) : 0;
    best = run > best ? run : best;
    a = to;
  }
  return best;
}

static int by_size_addr(const void *x, const void *y) {
  const block *a = *(const block *const *)x, *b = *(const block *const *)y;
  if (a->size != b->size)
    return a->size < b->size ? -1 : 1;
  return a->addr < b->addr ? -1 : a->addr > b->addr;
}

enum { AT_FIT, AT_SCAN, AT_FEWEST, NEW_SEGMENT };

/* Where the pool must place a request of rounded bytes on shard sh (*at),
 * and how it finds it. */
static int predict(shard *sh, size_t rounded, uintptr_t *at) {
  static block *c[4096];
  static uintptr_t pl[4096];
  size_t n = 0, nfree = 0;
  int large = size_is_large(rounded);
  for (segment *seg = sh->segments; seg; seg = seg->next) {
    cr_assert_not_null(seg->pages, "an expandable pool has vmm segments only");
    for (block *b = seg->first; b; b = b->next) {
      if (b->state != BLOCK_FREE)
        continue;
      nfree++;
      cr_assert_geq(b->mapped_run, longest_mapped(b),
                    "block at %#lx: mapped_run %zu, but %zu bytes of it are mapped in a row",
                    (unsigned long)b->addr, b->mapped_run, longest_mapped(b));
      if (!(b->mapped_run & 1)) /* bit 0 clear: the pool reads no page of it */
        cr_assert_eq(longest_mapped(b), b->size,
                     "block at %#lx (%zu bytes): marked all mapped, but %zu bytes of it are "
                     "mapped in a row",
                     (unsigned long)b->addr, b->size, longest_mapped(b));
      if (seg->large == large && b->size >= rounded && n < 4096)
        c[n++] = b;
    }
  }
  cr_assert_eq(sh->nfree, nfree, "the shard counts %zu free blocks, its segments hold %zu",
               sh->nfree, nfree);
  if (!n)
    return NEW_SEGMENT;
  qsort(c, n, sizeof *c, by_size_addr);
  if (missing(c[0], c[0]->addr, rounded) == 0) {
    *at = c[0]->addr;
    return AT_FIT;
  }
  for (size_t k = 0; k < n; k++)
    for (size_t i = 0, np = placements(c[k], rounded, pl, 4096); i < np; i++)
      if (missing(c[k], pl[i], rounded) == 0) {
        *at = pl[i];
        return AT_SCAN;
      }
  size_t best = SIZE_MAX;
  for (size_t k = 0; k < n; k++)
    for (size_t i = 0, np = placements(c[k], rounded, pl, 4096); i < np; i++) {
      size_t m = missing(c[k], pl[i], rounded);
      if (m < best) {
        best = m;
        *at = pl[i];
      }
    }
  return AT_FEWEST;
}

#define LIVE 96

/* ops random operations on a pool of the given backend, device capacity
 * (at most half of it allocated at a time) and tunables; every kind of
 * placement must have come up at least `least` times. */
static void run(gpupool_backend kind, size_t capacity, const char *tunables, uint64_t seed, int ops,
                int least) {
  gpupool_options o = {.name = "oracle",
                       .backend = kind,
                       .strategy = GPUPOOL_STRATEGY_BFC,
                       .host_capacity = capacity,
                       .tunables = tunables,
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  void *live[LIVE] = {0};
  size_t size[LIVE] = {0}, live_bytes = 0;
  int seen[4] = {0};
  rng = seed;
  for (int op = 0; op < ops; op++) {
    size_t k = rnd(LIVE);
    if (live[k]) {
      cr_assert_eq(gpupool_free(p, live[k]), GPUPOOL_OK);
      live[k] = NULL;
      live_bytes -= size[k];
      continue;
    }
    if (rnd(400) == 0) /* idle pages go back to the device */
      gpupool_empty_cache(p);
    /* small requests, and large ones of a few pages with ragged ends */
    size_t s = rnd(2) ? 1 + rnd(SMALL_SIZE) : SMALL_SIZE + 1 + rnd(24 * MiB);
    if (live_bytes + s > capacity / 2)
      continue;
    shard *sh = NULL;
    cr_assert_eq(shard_get(p, NULL, &sh), GPUPOOL_OK);
    uintptr_t want = 0;
    int how = predict(sh, size_round(&p->cfg, s), &want);
    seen[how]++;
    cr_assert_eq(gpupool_malloc(p, &live[k], s, NULL), GPUPOOL_OK, "op %d: %zu bytes: %s", op, s,
                 gpupool_last_error());
    size[k] = s;
    live_bytes += s;
    if (how != NEW_SEGMENT)
      cr_assert_eq((uintptr_t)live[k], want,
                   "op %d: %zu bytes (placement kind %d) at %#lx, the oracle says %#lx", op, s, how,
                   (unsigned long)(uintptr_t)live[k], (unsigned long)want);
  }
  for (size_t k = 0; k < LIVE; k++)
    if (live[k])
      cr_assert_eq(gpupool_free(p, live[k]), GPUPOOL_OK);
  gpupool_destroy(p);
  cr_assert_geq(seen[AT_FIT], least, "best fits over mapped pages: %d", seen[AT_FIT]);
  cr_assert_geq(seen[AT_SCAN], least, "placements found by the search: %d", seen[AT_SCAN]);
  cr_assert_geq(seen[AT_FEWEST], least, "placements that map pages: %d", seen[AT_FEWEST]);
}

Test(pool_expandable_oracle, simulated_device_defaults) {
  run(GPUPOOL_BACKEND_SIM, 1024 * MiB, "expandable_segments:True", 1, 20000, 50);
}

/* No slack: idle pages move to where they are needed, so free blocks lose
 * pages under them (their mapped_run shrinks) all the time. */
Test(pool_expandable_oracle, simulated_device_no_slack) {
  run(GPUPOOL_BACKEND_SIM, 1024 * MiB, "expandable_segments:True,expandable_slack_percent:0", 2,
      20000, 50);
}

Test(pool_expandable_oracle, host_backend_growth) {
  run(GPUPOOL_BACKEND_HOST, 256 * MiB, "expandable_segments:True,expandable_growth_moves:4", 3,
      8000, 20);
}
