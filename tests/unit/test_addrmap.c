/* The live-allocation map: random inserts, lookups and backward-shift erases
 * checked against a plain array, with keys chosen to collide. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "pool/addrmap.h"

#define KEYS 4096

static uint32_t rng = 12345;
static uint32_t next_random(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

/* Every key of the reference maps to its value; no other key is found. */
static void check_all(const addrmap *m, const int *live, size_t nlive, uintptr_t stride) {
  size_t found = 0;
  for (int k = 1; k <= KEYS; k++) {
    addrmap_entry *e = addrmap_find(m, (uintptr_t)k * stride);
    if (live[k]) {
      cr_assert(e, "key %d is live but not found", k);
      cr_assert_eq((uintptr_t)e->val, (uintptr_t)k, "key %d maps to %p", k, (void *)e->val);
      found++;
    } else
      cr_assert_null(e, "key %d was erased but is found", k);
  }
  cr_assert_eq(found, nlive);
  cr_assert_eq(m->used, nlive);
}

static void random_ops(uintptr_t stride, int rounds) {
  addrmap m = {0};
  static int live[KEYS + 1];
  memset(live, 0, sizeof live);
  size_t nlive = 0;
  for (int r = 0; r < rounds; r++) {
    int k = 1 + (int)(next_random() % KEYS);
    if (!live[k]) {
      cr_assert_eq(addrmap_insert(&m, (uintptr_t)k * stride, (struct block *)(uintptr_t)k), 0);
      live[k] = 1;
      nlive++;
    } else {
      addrmap_entry *e = addrmap_find(&m, (uintptr_t)k * stride);
      cr_assert(e);
      addrmap_erase(&m, e);
      live[k] = 0;
      nlive--;
    }
    if (r % 997 == 0)
      check_all(&m, live, nlive, stride);
  }
  check_all(&m, live, nlive, stride);
  addrmap_destroy(&m);
}

Test(addrmap, random_inserts_and_erases_match_a_reference) {
  random_ops(512, 200000);
}

/* A stride of 2^20 with the hash's >> 9 keeps keys distinct but feeds the
 * multiplier structured input: long probe runs that wrap around the table. */
Test(addrmap, clustered_keys_wrap_around_and_stay_findable) {
  random_ops((uintptr_t)1 << 20, 200000);
}

Test(addrmap, steady_insert_erase_keeps_the_table_small) {
  addrmap m = {0};
  for (uintptr_t i = 1; i <= 100000; i++) {
    cr_assert_eq(addrmap_insert(&m, i * 512, NULL), 0);
    addrmap_erase(&m, addrmap_find(&m, i * 512));
  }
  cr_assert_eq(m.used, 0);
  cr_assert_eq(m.mask + 1, 64, "one live key at a time needs no more than the first table");
  cr_assert_null(addrmap_find(&m, 512));
  addrmap_destroy(&m);
}

Test(addrmap, zero_key_and_empty_map_find_nothing) {
  addrmap m = {0};
  cr_assert_null(addrmap_find(&m, 4096));
  cr_assert_eq(addrmap_insert(&m, 4096, NULL), 0);
  cr_assert_null(addrmap_find(&m, 0));
  cr_assert_not_null(addrmap_find(&m, 4096));
  addrmap_destroy(&m);
}

/* Keys taken out (an export, pool/share.c) keep their room: the inserts
 * meanwhile grow the table as if they were there, so that putting them back
 * needs no host memory (no new table), and a key whose room is given up
 * stops counting. */
Test(addrmap, taken_keys_keep_their_room_until_put_back) {
  addrmap m = {0};
  for (uintptr_t k = 1; k <= 32; k++) /* 32 of 64 slots: the most before a growth */
    cr_assert_eq(addrmap_insert(&m, k * 512, (struct block *)k), 0);
  cr_assert_eq(m.mask + 1, 64);
  for (uintptr_t k = 1; k <= 4; k++) {
    addrmap_take(&m, addrmap_find(&m, k * 512));
    cr_assert_null(addrmap_find(&m, k * 512), "key %zu is still found once taken", (size_t)k);
  }
  cr_assert_eq(m.used, 32, "the taken keys' room is not kept");
  cr_assert_eq(addrmap_insert(&m, 100 * 512, NULL), 0);
  cr_assert_eq(m.mask + 1, 128, "an insert did not grow the table the taken keys count in");
  const addrmap_entry *tab = m.tab;
  for (uintptr_t k = 1; k <= 3; k++)
    addrmap_put_back(&m, k * 512, (struct block *)(k + 1000));
  cr_assert_eq(m.tab, tab, "putting keys back made a new table");
  cr_assert_eq(m.used, 33);
  for (uintptr_t k = 1; k <= 3; k++)
    cr_assert_eq((uintptr_t)addrmap_find(&m, k * 512)->val, k + 1000);
  addrmap_give_up_room(&m); /* key 4 stays out */
  cr_assert_eq(m.used, 32);
  cr_assert_null(addrmap_find(&m, 4 * 512));
  for (uintptr_t k = 5; k <= 32; k++)
    cr_assert_eq((uintptr_t)addrmap_find(&m, k * 512)->val, k);
  addrmap_destroy(&m);
}
