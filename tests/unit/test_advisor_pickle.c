/* The unpickler (advisor/pickle.c) on adversarial inputs: its memory
 * follows what a document holds, not how it is written. A memo index far
 * beyond the input is refused (it would cost a memo as large as the index),
 * and values the document drops from the stack are recycled; the values a
 * document keeps (through the memo, DUP or a container) stay intact. */
#include <criterion/criterion.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>

#include "advisor/pickle.h"

#ifdef __SANITIZE_ADDRESS__
/* ASan's allocator keeps no mallinfo; GCC ships no header for its count. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

/* Bytes the heap holds now. */
static size_t heap_in_use(void) {
#ifdef __SANITIZE_ADDRESS__
  return __sanitizer_get_current_allocated_bytes();
#else
  struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
#endif
}

/* LONG_BINPUT of index 2^28 - 1 in an 11-byte pickle: the old reader grew
 * its memo array to that index (2 GiB) before reading on. */
Test(advisor_pickle, memo_index_beyond_the_input_is_refused) {
  static const unsigned char far_put[] = "\x80\x04Nr\xff\xff\xff\x0f"
                                         "0N.";
  char err[200];
  size_t before = heap_in_use();
  pickle_doc *d;
  cr_expect_eq(pickle_load(far_put, sizeof far_put - 1, &d, err, sizeof err), PICKLE_MALFORMED);
  cr_expect_null(d);
  cr_expect(strstr(err, "byte 3: memo index beyond the input's length"), "%s", err);
  cr_expect_lt(heap_in_use(), before + 4096);
  pickle_free(d);
  /* the indexes a pickler writes (0, 1, ...) still read, however written */
  /* [7], the 7 memoized by LONG_BINPUT 1, fetched and popped again */
  static const unsigned char memo_ok[] = "\x80\x04]q\x00K\x07r\x01\x00\x00\x00"
                                         "a"
                                         "h\x01"
                                         "0.";
  cr_assert_eq(pickle_load(memo_ok, sizeof memo_ok - 1, &d, err, sizeof err), 0, "%s", err);
  cr_assert_not_null(d);
  const pv *root = pickle_root(d);
  cr_assert_eq(root->type, PV_LIST);
  cr_assert_eq(root->len, 1);
  cr_expect_eq(root->items[0]->i, 7);
  pickle_free(d);
}

/* "N0" a million times (2 MB): each None is dropped at once. The old reader
 * kept a 40-byte node for each (40 MB). */
Test(advisor_pickle, dropped_values_are_recycled) {
  size_t pairs = 1000000, len = 2 + 2 * pairs + 2;
  unsigned char *buf = malloc(len);
  cr_assert_not_null(buf);
  memcpy(buf, "\x80\x04", 2);
  for (size_t i = 0; i < pairs; i++)
    memcpy(buf + 2 + 2 * i, "N0", 2);
  memcpy(buf + len - 2, "N.", 2);
  char err[200];
  size_t before = heap_in_use();
  pickle_doc *d;
  cr_assert_eq(pickle_load(buf, len, &d, err, sizeof err), 0, "%s", err);
  cr_assert_not_null(d);
  size_t held = heap_in_use() - before;
  cr_expect_lt(held, len / 4, "%zu bytes held for a %zu-byte document of one None", held, len);
  cr_expect_eq(pickle_root(d)->type, PV_NONE);
  pickle_free(d);
  free(buf);
}

/* Values dropped (POP, POP_MARK, an object's state or arguments) between
 * values kept: what is kept reads back whole, and a value the memo or DUP
 * still refers to survives being popped. */
Test(advisor_pickle, kept_values_survive_recycling) {
  static const unsigned char doc[] = "\x80\x04"
                                     "}q\x00"    /* root dict, memo 0 */
                                     "\x8c\x01k" /* key 'k' */
                                     "]"         /* L */
                                     "]K\x01K\x02\x86"
                                     "a0" /* a list holding a tuple, dropped */
                                     "(]]K\x03"
                                     "a1" /* values above a MARK, one holding 3: dropped */
                                     "K\x05q\x01"
                                     "0" /* 5, memoized, popped */
                                     "K\x06"
                                     "20" /* 6, duplicated, one copy popped */
                                     "a"  /* L.append(6) */
                                     "\x8c\x01m\x8c\x01o\x93"
                                     "]b0" /* an object given a state, dropped */
                                     "(h\x01K\x09]K\x0a"
                                     "ae"  /* L.extend([5, 9, [10]]) */
                                     "s."; /* root['k'] = L */
  char err[200];
  pickle_doc *d;
  cr_assert_eq(pickle_load(doc, sizeof doc - 1, &d, err, sizeof err), 0, "%s", err);
  cr_assert_not_null(d);
  const pv *l = pv_get(pickle_root(d), "k");
  cr_assert_not_null(l);
  cr_assert_eq(l->type, PV_LIST);
  cr_assert_eq(l->len, 4);
  const int64_t want[] = {6, 5, 9};
  for (int i = 0; i < 3; i++) {
    cr_expect_eq(l->items[i]->type, PV_INT);
    cr_expect_eq(l->items[i]->i, want[i]);
  }
  cr_assert_eq(l->items[3]->type, PV_LIST);
  cr_assert_eq(l->items[3]->len, 1);
  cr_expect_eq(l->items[3]->items[0]->i, 10);
  pickle_free(d);
}
