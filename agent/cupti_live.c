/* Open-addressing live-allocation map: see cupti_live.h. */
#include "cupti_live.h"

#include <stdlib.h>
#include <string.h>

struct cupti_live {
  cupti_live_entry *slots;
  size_t mask; /* slots - 1 (a power of two) */
  size_t count;
  size_t max;
};

/* Device addresses are aligned (256 B and more): mix all bits before masking. */
static size_t slot_of(const cupti_live *m, uint64_t addr) {
  uint64_t x = addr;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return (size_t)x & m->mask;
}

cupti_live *cupti_live_create(size_t max_entries) {
  if (max_entries == 0)
    max_entries = 1;
  size_t nslots = 2;
  while (nslots < 2 * max_entries)
    nslots <<= 1;
  cupti_live *m = calloc(1, sizeof *m);
  if (!m)
    return NULL;
  m->slots = calloc(nslots, sizeof *m->slots);
  if (!m->slots) {
    free(m);
    return NULL;
  }
  m->mask = nslots - 1;
  m->max = max_entries;
  return m;
}

void cupti_live_destroy(cupti_live *m) {
  if (!m)
    return;
  free(m->slots);
  free(m);
}

static size_t probe(const cupti_live *m, uint64_t addr) {
  size_t i = slot_of(m, addr);
  while (m->slots[i].addr != 0 && m->slots[i].addr != addr)
    i = (i + 1) & m->mask;
  return i; /* the slot holding addr, or the empty slot where it would go */
}

cupti_live_insert_result cupti_live_insert(cupti_live *m, const cupti_live_entry *e,
                                           cupti_live_entry *old) {
  if (e->addr == 0)
    return CUPTI_LIVE_BAD_ADDR;
  size_t i = probe(m, e->addr);
  if (m->slots[i].addr == e->addr) {
    if (old)
      *old = m->slots[i];
    m->slots[i] = *e;
    return CUPTI_LIVE_REPLACED;
  }
  if (m->count >= m->max)
    return CUPTI_LIVE_FULL;
  m->slots[i] = *e;
  m->count++;
  return CUPTI_LIVE_INSERTED;
}

cupti_live_entry *cupti_live_find(cupti_live *m, uint64_t addr) {
  if (addr == 0)
    return NULL;
  size_t i = probe(m, addr);
  return m->slots[i].addr == addr ? &m->slots[i] : NULL;
}

int cupti_live_remove(cupti_live *m, uint64_t addr, cupti_live_entry *out) {
  if (addr == 0)
    return 0;
  size_t i = probe(m, addr);
  if (m->slots[i].addr != addr)
    return 0;
  if (out)
    *out = m->slots[i];
  /* Backward-shift deletion: move later members of the probe run into the
   * hole when their home slot does not lie cyclically in (hole, j]. */
  size_t hole = i;
  for (size_t j = (i + 1) & m->mask; m->slots[j].addr != 0; j = (j + 1) & m->mask) {
    size_t home = slot_of(m, m->slots[j].addr);
    int home_in_between = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
    if (!home_in_between) {
      m->slots[hole] = m->slots[j];
      hole = j;
    }
  }
  memset(&m->slots[hole], 0, sizeof m->slots[hole]);
  m->count--;
  return 1;
}

void cupti_live_clear(cupti_live *m) {
  memset(m->slots, 0, (m->mask + 1) * sizeof *m->slots);
  m->count = 0;
}

size_t cupti_live_count(const cupti_live *m) {
  return m->count;
}

size_t cupti_live_max(const cupti_live *m) {
  return m->max;
}
