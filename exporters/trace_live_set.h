/* The allocations a trace has opened (an async "b" event written) and not
 * yet closed: a hash set keyed by (space, address), so the writer closes only
 * what it opened and never writes an "e" without its "b". It grows with the
 * number of open allocations, which the rings being read bound. */
#ifndef GPUPOOL_TRACE_LIVE_SET_H
#define GPUPOOL_TRACE_LIVE_SET_H

#include <stddef.h>
#include <stdint.h>

typedef struct trace_live_set {
  struct live_entry *slots;
  size_t cap, count;
} trace_live_set;

void trace_live_set_init(trace_live_set *s);
void trace_live_set_free(trace_live_set *s);
/* Adds (space, addr) with value; replaces the value if present. 0 on
 * success, -1 on allocation failure. */
int trace_live_set_put(trace_live_set *s, uint8_t space, uint64_t addr, uint64_t value);
/* Removes (space, addr): 1 and its value in *value if it was there. */
int trace_live_set_take(trace_live_set *s, uint8_t space, uint64_t addr, uint64_t *value);
/* 1 and the value if (space, addr) is present. */
int trace_live_set_get(const trace_live_set *s, uint8_t space, uint64_t addr, uint64_t *value);

#endif
