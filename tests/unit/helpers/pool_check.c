#include "helpers/pool_check.h"

#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double pc_scale(void) {
  const char *s = getenv("GPUPOOL_TEST_SCALE");
  if (!s || !*s)
    return 1.0;
  char *end;
  double v = strtod(s, &end);
  return (*end == '\0' && v > 0) ? v : 1.0;
}

size_t pc_scaled(size_t n) {
  double v = (double)n * pc_scale();
  return v < 1 ? 1 : (size_t)v;
}

gpupool *pc_pool(gpupool_strategy strategy, size_t capacity, const char *tunables) {
  gpupool_options o = {0};
  o.name = "test";
  o.backend = GPUPOOL_BACKEND_HOST;
  o.strategy = strategy;
  o.host_capacity = capacity;
  o.tunables = tunables;
  o.ignore_env = 1;
  gpupool *p = NULL;
  gpupool_status st = gpupool_create(&o, &p);
  cr_assert_eq(st, GPUPOOL_OK, "gpupool_create(strategy %d, tunables \"%s\"): %s: %s", strategy,
               tunables ? tunables : "", gpupool_status_string(st), gpupool_last_error());
  cr_assert_not_null(p);
  return p;
}

gpupool_stats pc_stats(gpupool *p) {
  gpupool_stats s;
  memset(&s, 0xab, sizeof s);
  gpupool_status st = gpupool_get_stats(p, &s);
  cr_assert_eq(st, GPUPOOL_OK, "gpupool_get_stats: %s", gpupool_last_error());
  return s;
}

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Word k of the pattern; tail bytes take the low bytes of their word. */
static inline __attribute__((always_inline)) uint64_t pattern_word(uint64_t seed, size_t k) {
  return seed ^ ((uint64_t)k * 0x9e3779b97f4a7c15ull);
}

static uint64_t pattern_seed(const void *p, uint64_t id) {
  return mix64(id ^ mix64((uint64_t)(uintptr_t)p));
}

/* Pool memory is the host backend's own mappings, which AddressSanitizer
 * does not track: the word loops skip its per-access checks (they dominate
 * the sanitizer run time otherwise). ThreadSanitizer still watches them. */
#if defined(__clang__) || defined(__GNUC__)
#define PC_NO_ASAN __attribute__((no_sanitize("address")))
#else
#define PC_NO_ASAN
#endif

PC_NO_ASAN void pc_pattern_fill(void *p, size_t n, uint64_t id) {
  unsigned char *b = p;
  uint64_t seed = pattern_seed(p, id);
  size_t words = n / 8;
  if ((uintptr_t)b % 8 == 0) {
    uint64_t *w = (uint64_t *)b;
    for (size_t k = 0; k < words; k++)
      w[k] = pattern_word(seed, k);
  } else {
    for (size_t k = 0; k < words; k++) {
      uint64_t w = pattern_word(seed, k);
      memcpy(b + 8 * k, &w, 8);
    }
  }
  if (n % 8) {
    uint64_t w = pattern_word(seed, words);
    memcpy(b + 8 * words, &w, n % 8);
  }
}

/* Offset of the first byte of word k that differs from the pattern. */
static size_t first_bad_byte(const unsigned char *b, uint64_t seed, size_t k, size_t nbytes) {
  uint64_t want = pattern_word(seed, k);
  const unsigned char *w = (const unsigned char *)&want;
  for (size_t j = 0; j < nbytes; j++)
    if (b[8 * k + j] != w[j])
      return 8 * k + j;
  return SIZE_MAX;
}

PC_NO_ASAN size_t pc_pattern_check(const void *p, size_t n, uint64_t id) {
  const unsigned char *b = p;
  uint64_t seed = pattern_seed(p, id);
  size_t words = n / 8;
  for (size_t k = 0; k < words; k++) {
    uint64_t w;
    if ((uintptr_t)b % 8 == 0)
      w = ((const uint64_t *)b)[k];
    else
      memcpy(&w, b + 8 * k, 8);
    if (w != pattern_word(seed, k))
      return first_bad_byte(b, seed, k, 8);
  }
  if (n % 8)
    return first_bad_byte(b, seed, words, n % 8);
  return SIZE_MAX;
}

static size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

static size_t pow2_floor(size_t n) {
  size_t p = 1;
  while (p <= n / 2)
    p *= 2;
  return p;
}

size_t pc_bfc_round(size_t size, unsigned divisions) {
  if (size < 512)
    return 512;
  if (divisions > 1 && size > (size_t)512 * divisions) {
    size_t floor = pow2_floor(size);
    return floor == size ? size : round_up(size, floor / divisions);
  }
  return round_up(size, 512);
}

size_t pc_bfc_segment(size_t rounded) {
  if (!pc_is_large(rounded))
    return 2 * PC_MiB;
  if (rounded < 10 * PC_MiB)
    return 20 * PC_MiB;
  return round_up(rounded, 2 * PC_MiB);
}

/* The pool gives every request at least 512 bytes (the device alignment). */
size_t pc_round_bucket(size_t size, unsigned cutoff) {
  size_t linear = (size_t)1 << cutoff;
  if (size <= 512)
    return 512;
  if (size >= linear)
    return round_up(size, linear);
  size_t p = pow2_floor(size);
  return p == size ? p : 2 * p;
}

size_t pc_naive_round(size_t size) {
  return round_up(size, 4096);
}

/* Appends a failure to msg once; later ones are dropped (the first explains). */
static int fail(char *msg, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
  return -1;
}

typedef struct named_stat {
  const char *name;
  const gpupool_stat *s;
} named_stat;

static const char *const idx_name[GPUPOOL_STAT_TYPES] = {"all", "small", "large"};

#define I64(x) ((long long)(x))
#define U64(x) ((unsigned long long)(x))

static int check_one_stat(const named_stat *ns, int flags, char *msg, size_t len) {
  const gpupool_stat *s = ns->s;
  for (int i = 0; i < GPUPOOL_STAT_TYPES; i++) {
    if (s[i].current < 0)
      return fail(msg, len, "%s[%s].current %lld < 0", ns->name, idx_name[i], I64(s[i].current));
    if (s[i].peak < s[i].current)
      return fail(msg, len, "%s[%s].peak %lld < current %lld", ns->name, idx_name[i],
                  I64(s[i].peak), I64(s[i].current));
    if (!(flags & PC_ACCUMULATED_RESET) && s[i].current != s[i].allocated - s[i].freed)
      return fail(msg, len, "%s[%s]: current %lld != allocated %lld - freed %lld", ns->name,
                  idx_name[i], I64(s[i].current), I64(s[i].allocated), I64(s[i].freed));
  }
  const gpupool_stat *a = &s[GPUPOOL_STAT_ALL], *sm = &s[GPUPOOL_STAT_SMALL],
                     *lg = &s[GPUPOOL_STAT_LARGE];
  if (a->current != sm->current + lg->current || a->allocated != sm->allocated + lg->allocated ||
      a->freed != sm->freed + lg->freed)
    return fail(msg, len,
                "%s: all != small + large: current %lld/%lld+%lld allocated %lld/%lld+%lld "
                "freed %lld/%lld+%lld",
                ns->name, I64(a->current), I64(sm->current), I64(lg->current), I64(a->allocated),
                I64(sm->allocated), I64(lg->allocated), I64(a->freed), I64(sm->freed),
                I64(lg->freed));
  if (a->peak < sm->peak || a->peak < lg->peak || a->peak > sm->peak + lg->peak)
    return fail(msg, len, "%s: peak all %lld not within [max, sum] of small %lld, large %lld",
                ns->name, I64(a->peak), I64(sm->peak), I64(lg->peak));
  return 0;
}

#define NAMED_STATS 9

/* Every gpupool_stat array of s with its torch.cuda.memory_stats name. */
static void named_stats(const gpupool_stats *s, named_stat out[NAMED_STATS]) {
  const named_stat all[NAMED_STATS] = {
      {"allocation", s->allocation},
      {"segment", s->segment},
      {"active", s->active},
      {"inactive_split", s->inactive_split},
      {"allocated_bytes", s->allocated_bytes},
      {"reserved_bytes", s->reserved_bytes},
      {"active_bytes", s->active_bytes},
      {"inactive_split_bytes", s->inactive_split_bytes},
      {"requested_bytes", s->requested_bytes},
  };
  memcpy(out, all, sizeof all);
}

/* Without expandable segments, reserved - active is the free space, all
 * in free blocks. */
static int free_space_check(const gpupool_stats *s, int flags, char *msg, size_t len) {
  const int A = GPUPOOL_STAT_ALL;
  if (s->num_pages_moved || s->num_device_syncs)
    return fail(msg, len, "no expandable segments, yet %llu pages moved, %llu syncs",
                U64(s->num_pages_moved), U64(s->num_device_syncs));
  int64_t free_bytes = s->reserved_bytes[A].current - s->active_bytes[A].current;
  if ((int64_t)s->largest_free_block > free_bytes)
    return fail(msg, len, "largest_free_block %llu > reserved - active %lld",
                U64(s->largest_free_block), I64(free_bytes));
  if ((s->free_blocks == 0) != (s->largest_free_block == 0))
    return fail(msg, len, "free_blocks %llu but largest_free_block %llu", U64(s->free_blocks),
                U64(s->largest_free_block));
  if ((int64_t)s->free_blocks * 512 > free_bytes)
    return fail(msg, len, "free_blocks %llu cannot fit in reserved - active %lld",
                U64(s->free_blocks), I64(free_bytes));
  if (!(flags & PC_CONCURRENT) && free_bytes > 0 && s->free_blocks == 0)
    return fail(msg, len, "reserved - active = %lld bytes but no free block", I64(free_bytes));

  return 0;
}

/* With them, free blocks may lie on unmapped pages: only what is mapped
 * counts as reserved, in whole pages. */
static int expandable_check(const gpupool_stats *s, int flags, char *msg, size_t len) {
  if (s->reserved_bytes[GPUPOOL_STAT_LARGE].current % (int64_t)(2 * PC_MiB) != 0)
    return fail(msg, len, "expandable: large reserved %lld is not a number of 2 MiB pages",
                I64(s->reserved_bytes[GPUPOOL_STAT_LARGE].current));
  if (!(flags & PC_ACCUMULATED_RESET) && s->num_pages_moved && !s->num_device_alloc)
    return fail(msg, len, "expandable: %llu pages moved but none was ever created",
                U64(s->num_pages_moved));
  /* Free blocks span unmapped address range; what they hold is mapped. */
  int64_t free_bytes =
      s->reserved_bytes[GPUPOOL_STAT_ALL].current - s->active_bytes[GPUPOOL_STAT_ALL].current;
  if ((int64_t)s->largest_free_block > free_bytes)
    return fail(msg, len, "expandable: largest_free_block %llu > reserved - active %lld",
                U64(s->largest_free_block), I64(free_bytes));
  return 0;
}

/* Segments are device allocations one for one. */
static int device_calls_check(const gpupool_stats *s, char *msg, size_t len) {
  const int A = GPUPOOL_STAT_ALL;
  if (s->num_device_alloc - s->num_device_free != (uint64_t)s->segment[A].current)
    return fail(msg, len, "device allocs %llu - device frees %llu != segment.current %lld",
                U64(s->num_device_alloc), U64(s->num_device_free), I64(s->segment[A].current));
  if (s->num_device_alloc != (uint64_t)s->segment[A].allocated ||
      s->num_device_free != (uint64_t)s->segment[A].freed)
    return fail(msg, len, "device allocs/frees %llu/%llu != segment allocated/freed %lld/%lld",
                U64(s->num_device_alloc), U64(s->num_device_free), I64(s->segment[A].allocated),
                I64(s->segment[A].freed));
  return 0;
}

int pc_check_invariants(const gpupool_stats *s, gpupool_strategy strategy, int flags, char *msg,
                        size_t len) {
  named_stat all[NAMED_STATS];
  named_stats(s, all);
  for (size_t k = 0; k < NAMED_STATS; k++)
    if (check_one_stat(&all[k], flags, msg, len))
      return -1;

  for (int i = 0; i < GPUPOOL_STAT_TYPES; i++) {
    int64_t req = s->requested_bytes[i].current, alloc = s->allocated_bytes[i].current,
            act = s->active_bytes[i].current, res = s->reserved_bytes[i].current,
            isb = s->inactive_split_bytes[i].current;
    if (!(req <= alloc && alloc <= act && act <= res))
      return fail(msg, len,
                  "[%s] requested %lld <= allocated %lld <= active %lld <= reserved %lld fails",
                  idx_name[i], I64(req), I64(alloc), I64(act), I64(res));
    if (!(flags & PC_EXPANDABLE) && act + isb > res)
      return fail(msg, len, "[%s] active_bytes %lld + inactive_split_bytes %lld > reserved %lld",
                  idx_name[i], I64(act), I64(isb), I64(res));
    if (s->allocation[i].current > s->active[i].current)
      return fail(msg, len, "[%s] allocation %lld > active %lld", idx_name[i],
                  I64(s->allocation[i].current), I64(s->active[i].current));
    if ((s->allocation[i].current == 0) != (alloc == 0) ||
        (s->active[i].current == 0) != (act == 0) ||
        (!(flags & PC_EXPANDABLE) && (s->segment[i].current == 0) != (res == 0)))
      return fail(msg, len, "[%s] a count and its bytes disagree on zero", idx_name[i]);
  }

  const int A = GPUPOOL_STAT_ALL;
  if (s->active[A].current != s->allocation[A].current + (int64_t)s->pending_free_blocks)
    return fail(msg, len, "active %lld != allocation %lld + pending_free_blocks %llu",
                I64(s->active[A].current), I64(s->allocation[A].current),
                U64(s->pending_free_blocks));
  if ((uint64_t)s->inactive_split[A].current > s->free_blocks)
    return fail(msg, len, "inactive_split %lld > free_blocks %llu",
                I64(s->inactive_split[A].current), U64(s->free_blocks));
  if (flags & PC_EXPANDABLE ? expandable_check(s, flags, msg, len)
                            : free_space_check(s, flags, msg, len))
    return -1;

  if (!(flags & PC_ACCUMULATED_RESET)) {
    if (s->num_cache_hits + s->num_device_sourced != (uint64_t)s->allocation[A].allocated)
      return fail(msg, len, "cache hits %llu + device sourced %llu != allocation.allocated %lld",
                  U64(s->num_cache_hits), U64(s->num_device_sourced),
                  I64(s->allocation[A].allocated));
    if (!(flags & PC_EXPANDABLE) && device_calls_check(s, msg, len))
      return -1;
    if (s->num_frees != (uint64_t)s->allocation[A].freed)
      return fail(msg, len, "num_frees %llu != allocation.freed %lld", U64(s->num_frees),
                  I64(s->allocation[A].freed));
    if (s->active[A].allocated != s->allocation[A].allocated)
      return fail(msg, len, "active.allocated %lld != allocation.allocated %lld",
                  I64(s->active[A].allocated), I64(s->allocation[A].allocated));
    if (!(flags & PC_EXPANDABLE) && s->num_device_sourced > s->num_device_alloc)
      return fail(msg, len, "device sourced %llu > device allocs %llu", U64(s->num_device_sourced),
                  U64(s->num_device_alloc));
  }

  const int S = GPUPOOL_STAT_SMALL;
  if (strategy == GPUPOOL_STRATEGY_BFC || strategy == GPUPOOL_STRATEGY_DEFAULT) {
    /* Expandable: a small segment is a range of one page, which may have
     * moved to a large block (or not be mapped yet). */
    int64_t small_bytes = s->segment[S].current * (int64_t)(2 * PC_MiB);
    if (flags & PC_EXPANDABLE ? s->reserved_bytes[S].current > small_bytes ||
                                    s->reserved_bytes[S].current % (int64_t)(2 * PC_MiB) != 0
                              : s->reserved_bytes[S].current != small_bytes)
      return fail(msg, len, "bfc: small reserved %lld %s %lld segments of 2 MiB",
                  I64(s->reserved_bytes[S].current),
                  flags & PC_EXPANDABLE ? "not in pages of" : "!=", I64(s->segment[S].current));
    if (s->reserved_bytes[GPUPOOL_STAT_LARGE].current % (int64_t)(2 * PC_MiB) != 0)
      return fail(msg, len, "bfc: large reserved %lld is not a multiple of 2 MiB",
                  I64(s->reserved_bytes[GPUPOOL_STAT_LARGE].current));
  } else {
    for (int i = 0; i < GPUPOOL_STAT_TYPES; i++)
      if (s->inactive_split[i].current != 0 || s->inactive_split_bytes[i].current != 0)
        return fail(msg, len, "%s never splits, yet inactive_split[%s] = %lld (%lld bytes)",
                    strategy == GPUPOOL_STRATEGY_ROUND ? "round" : "naive", idx_name[i],
                    I64(s->inactive_split[i].current), I64(s->inactive_split_bytes[i].current));
    /* one block per segment: every segment is active or one free block */
    if (!(flags & PC_CONCURRENT) &&
        (uint64_t)s->segment[A].current != (uint64_t)s->active[A].current + s->free_blocks)
      return fail(msg, len, "segments %lld != active blocks %lld + free blocks %llu",
                  I64(s->segment[A].current), I64(s->active[A].current), U64(s->free_blocks));
    if (s->reserved_bytes[S].current > s->segment[S].current * (int64_t)PC_MiB)
      return fail(msg, len, "small reserved %lld exceeds %lld segments of at most 1 MiB",
                  I64(s->reserved_bytes[S].current), I64(s->segment[S].current));
    if (strategy == GPUPOOL_STRATEGY_NAIVE && s->reserved_bytes[A].current % 4096 != 0)
      return fail(msg, len, "naive: reserved %lld is not page-rounded",
                  I64(s->reserved_bytes[A].current));
  }
  return 0;
}

void pc_model_update(pc_model *m, int large, size_t requested, size_t rounded, size_t slack,
                     int sign) {
  int idx[2] = {GPUPOOL_STAT_ALL, large ? GPUPOOL_STAT_LARGE : GPUPOOL_STAT_SMALL};
  for (int k = 0; k < 2; k++) {
    m->count[idx[k]] += sign;
    m->requested[idx[k]] += sign * (int64_t)requested;
    m->rounded[idx[k]] += sign * (int64_t)rounded;
    m->slack[idx[k]] += sign * (int64_t)slack;
  }
}

int pc_check_model(const gpupool_stats *s, const pc_model *m, char *msg, size_t len) {
  for (int i = 0; i < GPUPOOL_STAT_TYPES; i++) {
    if (s->allocation[i].current != m->count[i])
      return fail(msg, len, "allocation[%s].current %lld, expected %lld live", idx_name[i],
                  I64(s->allocation[i].current), I64(m->count[i]));
    if (s->requested_bytes[i].current != m->requested[i])
      return fail(msg, len, "requested_bytes[%s].current %lld, expected %lld", idx_name[i],
                  I64(s->requested_bytes[i].current), I64(m->requested[i]));
    int64_t a = s->allocated_bytes[i].current;
    if (a < m->rounded[i] || a > m->rounded[i] + m->slack[i]) {
      if (m->slack[i] == 0)
        return fail(msg, len, "allocated_bytes[%s].current %lld, expected %lld", idx_name[i],
                    I64(a), I64(m->rounded[i]));
      return fail(msg, len, "allocated_bytes[%s].current %lld, expected %lld + at most %lld",
                  idx_name[i], I64(a), I64(m->rounded[i]), I64(m->slack[i]));
    }
  }
  return 0;
}

int pc_check_empty(const gpupool_stats *s, char *msg, size_t len) {
  named_stat all[NAMED_STATS];
  named_stats(s, all);
  for (size_t k = 0; k < NAMED_STATS; k++)
    for (int i = 0; i < GPUPOOL_STAT_TYPES; i++)
      if (all[k].s[i].current != 0)
        return fail(msg, len, "%s[%s].current is %lld, expected 0", all[k].name, idx_name[i],
                    I64(all[k].s[i].current));
  if (s->free_blocks || s->pending_free_blocks || s->largest_free_block)
    return fail(msg, len, "free_blocks %llu, pending %llu, largest free %llu: expected 0",
                U64(s->free_blocks), U64(s->pending_free_blocks), U64(s->largest_free_block));
  if (s->num_device_alloc != s->num_device_free)
    return fail(msg, len, "device allocs %llu != device frees %llu", U64(s->num_device_alloc),
                U64(s->num_device_free));
  return 0;
}

void *pc_must_malloc(gpupool *p, size_t size, void *stream) {
  void *ptr = NULL;
  gpupool_status st = gpupool_malloc(p, &ptr, size, stream);
  cr_assert_eq(st, GPUPOOL_OK, "malloc(%zu): %s", size, gpupool_last_error());
  return ptr;
}

void pc_must_free(gpupool *p, void *ptr) {
  gpupool_status st = gpupool_free(p, ptr);
  cr_assert_eq(st, GPUPOOL_OK, "free(%p): %s", ptr, gpupool_last_error());
}

void pc_expect_consistent(gpupool *p, gpupool_strategy strategy) {
  gpupool_stats s = pc_stats(p);
  char msg[256];
  cr_expect_eq(pc_check_invariants(&s, strategy, 0, msg, sizeof msg), 0, "%s", msg);
}
