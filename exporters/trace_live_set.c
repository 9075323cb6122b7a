#include "trace_live_set.h"

#include <stdlib.h>
#include <string.h>

/* Open addressing with linear probing and backward-shift deletion (no
 * tombstones); the table stays at most half full. */
typedef struct live_entry {
  uint64_t addr;
  uint64_t value;
  uint8_t space;
  uint8_t used;
} live_entry;

void trace_live_set_init(trace_live_set *s) {
  memset(s, 0, sizeof *s);
}

void trace_live_set_free(trace_live_set *s) {
  free(s->slots);
  memset(s, 0, sizeof *s);
}

static size_t hash(uint8_t space, uint64_t addr) {
  uint64_t h = (addr ^ ((uint64_t)space << 56)) * 0x9e3779b97f4a7c15ull;
  return (size_t)(h ^ (h >> 29));
}

static live_entry *find(const trace_live_set *s, uint8_t space, uint64_t addr) {
  if (!s->cap)
    return NULL;
  size_t mask = s->cap - 1;
  for (size_t i = hash(space, addr) & mask;; i = (i + 1) & mask) {
    live_entry *e = &s->slots[i];
    if (!e->used)
      return NULL;
    if (e->addr == addr && e->space == space)
      return e;
  }
}

static void insert_new(live_entry *slots, size_t cap, const live_entry *src) {
  size_t mask = cap - 1;
  size_t i = hash(src->space, src->addr) & mask;
  while (slots[i].used)
    i = (i + 1) & mask;
  slots[i] = *src;
}

static int grow(trace_live_set *s) {
  size_t cap = s->cap ? s->cap * 2 : 256;
  live_entry *slots = calloc(cap, sizeof *slots);
  if (!slots)
    return -1;
  for (size_t i = 0; i < s->cap; i++)
    if (s->slots[i].used)
      insert_new(slots, cap, &s->slots[i]);
  free(s->slots);
  s->slots = slots;
  s->cap = cap;
  return 0;
}

int trace_live_set_put(trace_live_set *s, uint8_t space, uint64_t addr, uint64_t value) {
  live_entry *e = find(s, space, addr);
  if (e) {
    e->value = value;
    return 0;
  }
  if ((s->count + 1) * 2 > s->cap && grow(s) != 0)
    return -1;
  live_entry n = {.addr = addr, .value = value, .space = space, .used = 1};
  insert_new(s->slots, s->cap, &n);
  s->count++;
  return 0;
}

int trace_live_set_get(const trace_live_set *s, uint8_t space, uint64_t addr, uint64_t *value) {
  const live_entry *e = find(s, space, addr);
  if (!e)
    return 0;
  *value = e->value;
  return 1;
}

int trace_live_set_take(trace_live_set *s, uint8_t space, uint64_t addr, uint64_t *value) {
  live_entry *e = find(s, space, addr);
  if (!e)
    return 0;
  *value = e->value;
  size_t mask = s->cap - 1;
  size_t hole = (size_t)(e - s->slots);
  /* Shift back the entries that probed past the hole. */
  for (size_t i = (hole + 1) & mask; s->slots[i].used; i = (i + 1) & mask) {
    size_t home = hash(s->slots[i].space, s->slots[i].addr) & mask;
    /* Move entry i into the hole unless its home lies in (hole, i]. */
    int stays = hole <= i ? (home > hole && home <= i) : (home > hole || home <= i);
    if (!stays) {
      s->slots[hole] = s->slots[i];
      hole = i;
    }
  }
  s->slots[hole].used = 0;
  s->count--;
  return 1;
}
