/* The bounded open-addressing live-allocation map of the CUPTI decoder. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "agent/cupti_live.h"

static cupti_live_entry entry(uint64_t addr, uint64_t bytes) {
  cupti_live_entry e = {.addr = addr, .bytes = bytes, .device = 0, .kind = 3, .owner = 1};
  return e;
}

Test(cupti_live, insert_find_remove) {
  cupti_live *m = cupti_live_create(16);
  cr_assert_not_null(m);
  cupti_live_entry e = entry(0x1000, 64);
  cr_assert_eq(cupti_live_insert(m, &e, NULL), CUPTI_LIVE_INSERTED);
  cr_assert_eq(cupti_live_count(m), 1);
  cupti_live_entry *f = cupti_live_find(m, 0x1000);
  cr_assert_not_null(f);
  cr_assert_eq(f->bytes, 64);
  cupti_live_entry out;
  cr_assert_eq(cupti_live_remove(m, 0x1000, &out), 1);
  cr_assert_eq(out.bytes, 64);
  cr_assert_eq(cupti_live_remove(m, 0x1000, &out), 0);
  cr_assert_null(cupti_live_find(m, 0x1000));
  cr_assert_eq(cupti_live_count(m), 0);
  cupti_live_destroy(m);
}

Test(cupti_live, replace_returns_the_old_entry) {
  cupti_live *m = cupti_live_create(4);
  cupti_live_entry a = entry(0x2000, 10), b = entry(0x2000, 20), old;
  cupti_live_insert(m, &a, NULL);
  cr_assert_eq(cupti_live_insert(m, &b, &old), CUPTI_LIVE_REPLACED);
  cr_assert_eq(old.bytes, 10);
  cr_assert_eq(cupti_live_find(m, 0x2000)->bytes, 20);
  cr_assert_eq(cupti_live_count(m), 1);
  cupti_live_destroy(m);
}

Test(cupti_live, full_and_null_address) {
  cupti_live *m = cupti_live_create(3);
  cr_assert_eq(cupti_live_max(m), 3);
  for (uint64_t i = 1; i <= 3; i++) {
    cupti_live_entry e = entry(i * 256, i);
    cr_assert_eq(cupti_live_insert(m, &e, NULL), CUPTI_LIVE_INSERTED);
  }
  cupti_live_entry e = entry(4 * 256, 4);
  cr_assert_eq(cupti_live_insert(m, &e, NULL), CUPTI_LIVE_FULL);
  cupti_live_entry again = entry(2 * 256, 9); /* replacing needs no room */
  cr_assert_eq(cupti_live_insert(m, &again, NULL), CUPTI_LIVE_REPLACED);
  cupti_live_entry zero = entry(0, 1);
  cr_assert_eq(cupti_live_insert(m, &zero, NULL), CUPTI_LIVE_BAD_ADDR);
  cr_assert_eq(cupti_live_remove(m, 0, NULL), 0);
  cupti_live_clear(m);
  cr_assert_eq(cupti_live_count(m), 0);
  cr_assert_eq(cupti_live_insert(m, &e, NULL), CUPTI_LIVE_INSERTED);
  cupti_live_destroy(m);
}

/* Random inserts and removes against a plain array: backward-shift deletion
 * must keep every remaining key reachable. */
Test(cupti_live, matches_a_reference_under_churn) {
  enum { KEYS = 512, STEPS = 20000 };
  cupti_live *m = cupti_live_create(KEYS);
  static uint64_t ref[KEYS]; /* bytes + 1 when live, 0 when not */
  srand(12345);
  for (int s = 0; s < STEPS; s++) {
    int k = rand() % KEYS;
    uint64_t addr = 0x7f0000000000ull + (uint64_t)k * 512; /* aligned, like device memory */
    if (ref[k]) {
      cupti_live_entry out;
      cr_assert_eq(cupti_live_remove(m, addr, &out), 1);
      cr_assert_eq(out.bytes + 1, ref[k]);
      ref[k] = 0;
    } else {
      cupti_live_entry e = entry(addr, (uint64_t)s);
      cr_assert_eq(cupti_live_insert(m, &e, NULL), CUPTI_LIVE_INSERTED);
      ref[k] = (uint64_t)s + 1;
    }
  }
  size_t live = 0;
  for (int k = 0; k < KEYS; k++) {
    cupti_live_entry *f = cupti_live_find(m, 0x7f0000000000ull + (uint64_t)k * 512);
    if (ref[k]) {
      live++;
      cr_assert_not_null(f, "key %d lost", k);
      cr_assert_eq(f->bytes + 1, ref[k]);
    } else {
      cr_assert_null(f, "key %d should be gone", k);
    }
  }
  cr_assert_eq(cupti_live_count(m), live);
  cupti_live_destroy(m);
}
