#include "addrmap.h"

#include <stdlib.h>

#include "core/assert.h"

/* Places an entry whose key is not in tab (of mask + 1 slots, not full). */
static void place(addrmap_entry *tab, uint32_t mask, addrmap_entry e) {
  uint32_t i = addrmap_slot(e.key, mask);
  while (tab[i].key)
    i = (i + 1) & mask;
  tab[i] = e;
}

/* Cold: kept out of addrmap_insert so that its fast path saves no registers. */
__attribute__((noinline, cold)) static int grow(addrmap *m) {
  uint32_t cap = m->tab ? (m->mask + 1) * 2 : 64;
  addrmap_entry *n = calloc(cap, sizeof *n);
  if (!n)
    return -1;
  for (uint32_t i = 0; m->tab && i <= m->mask; i++)
    if (m->tab[i].key)
      place(n, cap - 1, m->tab[i]);
  free(m->tab);
  m->tab = n;
  m->mask = cap - 1;
  return 0;
}

int addrmap_insert(addrmap *m, uintptr_t key, struct block *val) {
  gp_assert_internal(key && !addrmap_find(m, key));
  /* At most half full: probe runs stay short. */
  if ((!m->tab || (m->used + 1) * 2 > m->mask + 1) && grow(m) != 0)
    return -1;
  place(m->tab, m->mask, (addrmap_entry){key, val});
  m->used++;
  return 0;
}

/* Empties entry e of m (used unchanged). */
static void unlink_entry(addrmap *m, addrmap_entry *e) {
  /* Backward shift: later entries of the probe run that may not sit after
   * the hole (their home slot is not cyclically in (hole, j]) move into it,
   * so that every lookup still finds its key before an empty slot. */
  uint32_t mask = m->mask, hole = (uint32_t)(e - m->tab);
  for (uint32_t j = (hole + 1) & mask; m->tab[j].key; j = (j + 1) & mask) {
    uint32_t home = addrmap_slot(m->tab[j].key, mask);
    if (((j - home) & mask) >= ((j - hole) & mask)) {
      m->tab[hole] = m->tab[j];
      hole = j;
    }
  }
  m->tab[hole].key = 0;
}

void addrmap_erase(addrmap *m, addrmap_entry *e) {
  unlink_entry(m, e);
  m->used--;
}

void addrmap_take(addrmap *m, addrmap_entry *e) {
  unlink_entry(m, e);
}

void addrmap_put_back(addrmap *m, uintptr_t key, struct block *val) {
  /* used counted the key while it was out: at most half the slots hold keys */
  gp_assert_internal(key && !addrmap_find(m, key) && m->used * 2 <= m->mask + 1);
  place(m->tab, m->mask, (addrmap_entry){key, val});
}

void addrmap_give_up_room(addrmap *m) {
  gp_assert_internal(m->used > 0);
  m->used--;
}

void addrmap_destroy(addrmap *m) {
  free(m->tab);
  m->tab = NULL;
  m->used = 0;
}
