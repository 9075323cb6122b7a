/* Shared helpers of the pool tests: pool creation on the host backend,
 * patterns written into allocations, the rounding rules of each strategy
 * (computed independently of pool/), and checkers of the statistics'
 * invariants. Checkers return 0 or -1 with a one-line reason, so that they
 * can run on any thread; the caller asserts. */
#ifndef GPUPOOL_TESTS_POOL_CHECK_H
#define GPUPOOL_TESTS_POOL_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool/gpupool.h"
#include "gpupool/host.h"

#define PC_KiB ((size_t)1 << 10)
#define PC_MiB ((size_t)1 << 20)
#define PC_GiB ((size_t)1 << 30)

/* GPUPOOL_TEST_SCALE (default 1): CI lowers it under sanitizers. */
double pc_scale(void);
/* n times the scale, at least 1. */
size_t pc_scaled(size_t n);

/* A host-backend pool that ignores GPUPOOL_CONF; capacity 0 = default.
 * Fails the current test (main thread only) when creation fails. */
gpupool *pc_pool(gpupool_strategy strategy, size_t capacity, const char *tunables);
/* gpupool_get_stats that fails the current test when it fails. */
gpupool_stats pc_stats(gpupool *p);

/* A pattern derived from id and the address, over n bytes. pc_pattern_check
 * returns the offset of the first wrong byte, or SIZE_MAX if all are right. */
void pc_pattern_fill(void *p, size_t n, uint64_t id);
size_t pc_pattern_check(const void *p, size_t n, uint64_t id);

/* The rounding and segment rules of docs/pool.md ("Strategies and size
 * classes"), written out again, independently of pool/sizeclass.c, for the
 * tests to compare the pool with. */
size_t pc_bfc_round(size_t size, unsigned divisions);
size_t pc_bfc_segment(size_t rounded);
size_t pc_round_bucket(size_t size, unsigned cutoff);
size_t pc_naive_round(size_t size);
static inline int pc_is_large(size_t rounded) {
  return rounded > PC_MiB;
}

/* Invariants that hold at every moment for any sequence of calls:
 * current == allocated - freed (unless accumulated stats were reset),
 * ALL == SMALL + LARGE, peak >= current, requested <= allocated <= active <=
 * reserved, the counters reconcile with the stats, and the strategy's
 * segment shape (bfc small segments are 2 MiB; round and naive never split). */
enum {
  PC_ACCUMULATED_RESET = 1,
  /* Stats read while other threads allocate: the shard-side numbers and the
   * segment numbers are read under different locks, so a segment may be
   * counted that its shard's blocks were read before. Skips the checks that
   * equate the two sides. */
  PC_CONCURRENT = 2,
  /* expandable_segments: reserved counts mapped pages, and free blocks may
   * lie on unmapped ones; the device calls count page batches, not segments */
  PC_EXPANDABLE = 4,
};
int pc_check_invariants(const gpupool_stats *s, gpupool_strategy strategy, int flags, char *msg,
                        size_t len);

/* What a test knows it holds: live allocations, their requested bytes and
 * the rounded bytes it expects, per GPUPOOL_STAT_* index. A pool may hand a
 * whole cached block to a request (no split), so allocated_bytes may exceed
 * `rounded` by at most `slack`. */
typedef struct pc_model {
  int64_t count[GPUPOOL_STAT_TYPES];
  int64_t requested[GPUPOOL_STAT_TYPES];
  int64_t rounded[GPUPOOL_STAT_TYPES];
  int64_t slack[GPUPOOL_STAT_TYPES];
} pc_model;
/* sign +1 adds an allocation, -1 removes it. */
void pc_model_update(pc_model *m, int large, size_t requested, size_t rounded, size_t slack,
                     int sign);
int pc_check_model(const gpupool_stats *s, const pc_model *m, char *msg, size_t len);

/* Every current of s is zero (no live allocation, nothing reserved). */
int pc_check_empty(const gpupool_stats *s, char *msg, size_t len);

/* gpupool_malloc / gpupool_free that fail the test, with the pool's reason. */
void *pc_must_malloc(gpupool *p, size_t size, void *stream);
void pc_must_free(gpupool *p, void *ptr);
/* Expects every invariant of pc_check_invariants to hold right now. */
void pc_expect_consistent(gpupool *p, gpupool_strategy strategy);

#endif
