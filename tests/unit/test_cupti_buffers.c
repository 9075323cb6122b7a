/* The fixed set of CUPTI activity buffers. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "agent/cupti_buffers.h"

static int all_zero(const uint8_t *b) {
  for (size_t i = 0; i < CUPTI_BUFFER_SIZE; i++)
    if (b[i])
      return 0;
  return 1;
}

Test(cupti_buffers, none_before_init) {
  int low;
  cr_assert_null(cupti_buffers_take(&low));
}

Test(cupti_buffers, take_all_then_exhausted_then_reuse_zeroed) {
  cr_assert_eq(cupti_buffers_init(), 0);
  cr_assert_eq(cupti_buffers_init(), 0, "a second init does nothing");
  cr_assert_eq(cupti_buffers_free_count(), CUPTI_BUFFER_COUNT);
  uint8_t *taken[CUPTI_BUFFER_COUNT];
  int low = 0;
  for (int i = 0; i < CUPTI_BUFFER_COUNT; i++) {
    taken[i] = cupti_buffers_take(&low);
    cr_assert_not_null(taken[i]);
    cr_assert(cupti_buffers_owns(taken[i]));
    cr_assert_eq((uintptr_t)taken[i] % 8, 0, "CUPTI needs 8-byte alignment");
    cr_assert(all_zero(taken[i]));
  }
  cr_assert(low, "the last takes report that few are free");
  cr_assert_null(cupti_buffers_take(&low));
  cr_assert(low);
  cr_assert_eq(cupti_buffers_exhausted(), 1);

  /* CUPTI wrote into one and gave it back: re-zeroed before reuse. */
  taken[5][0] = 0xAB;
  taken[5][CUPTI_BUFFER_SIZE - 1] = 0xCD;
  cupti_buffers_done(taken[5]);
  cr_assert_eq(cupti_buffers_free_count(), 0);
  cupti_buffers_rezero();
  cr_assert_eq(cupti_buffers_free_count(), 1);
  uint8_t *again = cupti_buffers_take(&low);
  cr_assert_eq(again, taken[5]);
  cr_assert(all_zero(again));
}

Test(cupti_buffers, used_buffer_is_zeroed_on_take_when_none_is_free) {
  cr_assert_eq(cupti_buffers_init(), 0);
  uint8_t *taken[CUPTI_BUFFER_COUNT];
  int low;
  for (int i = 0; i < CUPTI_BUFFER_COUNT; i++)
    taken[i] = cupti_buffers_take(&low);
  taken[9][100] = 1;
  cupti_buffers_done(taken[9]); /* not yet re-zeroed by the flush thread */
  uint8_t *b = cupti_buffers_take(&low);
  cr_assert_eq(b, taken[9]);
  cr_assert(all_zero(b));
  cr_assert_eq(cupti_buffers_exhausted(), 0);
}

Test(cupti_buffers, foreign_pointers_are_not_ours) {
  cr_assert_eq(cupti_buffers_init(), 0);
  int low;
  uint8_t *b = cupti_buffers_take(&low);
  cr_assert_not(cupti_buffers_owns(b + 1));
  static uint8_t other[16];
  cr_assert_not(cupti_buffers_owns(other));
  cupti_buffers_done(other); /* ignored */
  cr_assert_eq(cupti_buffers_free_count(), CUPTI_BUFFER_COUNT - 1);
}
