#include "sizeclass.h"

static size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

static size_t floor_pow2(size_t n) {
  return (size_t)1 << (63 - __builtin_clzll(n));
}

/* PyTorch's roundup_power2_divisions: split [2^k, 2^(k+1)) into D steps. */
static size_t round_power2_division(size_t size, unsigned divisions) {
  size_t floor = floor_pow2(size);
  if (floor == size)
    return size;
  size_t step = floor / divisions;
  return step < MIN_BLOCK ? round_up(size, MIN_BLOCK) : round_up(size, step);
}

static size_t round_bfc(const pool_config *c, size_t size) {
  if (size < MIN_BLOCK)
    return MIN_BLOCK;
  unsigned d = c->roundup_power2_divisions;
  if (d > 1 && size > (size_t)MIN_BLOCK * d)
    return round_power2_division(size, d);
  return round_up(size, MIN_BLOCK);
}

/* MXNet Round: powers of two below 2^cutoff, multiples of 2^cutoff above. */
static size_t round_mxnet(const pool_config *c, size_t size) {
  size_t cutoff = (size_t)1 << c->round_linear_cutoff;
  if (size < MIN_BLOCK)
    return MIN_BLOCK;
  if (size < cutoff) {
    size_t p = floor_pow2(size);
    return p == size ? p : p << 1;
  }
  return round_up(size, cutoff);
}

size_t size_round(const pool_config *c, size_t size) {
  switch (c->strategy) {
  case GPUPOOL_STRATEGY_ROUND:
    return round_mxnet(c, size);
  case GPUPOOL_STRATEGY_NAIVE:
    return round_up(size, NAIVE_PAGE);
  default:
    return round_bfc(c, size);
  }
}

size_t size_segment(const pool_config *c, size_t rounded) {
  if (c->strategy != GPUPOOL_STRATEGY_BFC)
    return rounded; /* one block per segment: no split */
  if (!size_is_large(rounded))
    return SMALL_SEGMENT;
  if (rounded < MIN_LARGE_ALLOC)
    return LARGE_SEGMENT;
  return round_up(rounded, ROUND_LARGE);
}
