/* The free-block treap: random inserts, removes, and replaces by a smaller
 * or larger key (shrink, grow) checked against a sorted reference, with the
 * order and heap invariants walked after every operation. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "pool/free_index.h"

#define NODES 512

static uint32_t rng = 2463534242u;
static uint32_t next_random(void) {
  rng ^= rng << 13;
  rng ^= rng >> 17;
  rng ^= rng << 5;
  return rng;
}

static int key_less(const block *a, const block *b) {
  return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

/* In-order walk: the order is strict, every child's priority is at most its
 * parent's, and the nodes are exactly the n of want[] (sorted). */
static size_t walk(const block *t, const block **out, size_t n, uint32_t parent_prio) {
  if (!t)
    return n;
  cr_assert_leq(t->prio, parent_prio, "heap order broken at size %zu", t->size);
  n = walk(t->left, out, n, t->prio);
  out[n++] = t;
  return walk(t->right, out, n, t->prio);
}

static int cmp_blocks(const void *a, const void *b) {
  const block *x = *(const block *const *)a, *y = *(const block *const *)b;
  return key_less(x, y) ? -1 : key_less(y, x);
}

static void check(block *root, block **in, size_t nin) {
  static const block *seen[NODES];
  size_t n = walk(root, seen, 0, UINT32_MAX);
  cr_assert_eq(n, nin, "index holds %zu blocks, expected %zu", n, nin);
  qsort(in, nin, sizeof *in, cmp_blocks);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(seen[i], in[i], "block %zu in order is not the expected one", i);
}

/* A key not used by any block: sizes collide often, addresses never. */
static void fresh_key(block *b, uintptr_t *next_addr) {
  b->size = 512 * (1 + next_random() % 64);
  b->addr = (*next_addr += 512);
}

Test(free_index, random_inserts_removes_and_replaces_keep_the_treap_sorted) {
  static block nodes[NODES];
  block *in[NODES]; /* the blocks in the index */
  block *out[NODES];
  size_t nin = 0, nout = 0;
  uintptr_t next_addr = 0;
  for (size_t i = 0; i < NODES; i++)
    out[nout++] = &nodes[i];
  block *root = NULL;
  int replaced = 0, refused = 0;
  for (int op = 0; op < 40000; op++) {
    uint32_t r = next_random() % 3;
    if ((r == 0 || nin == 0) && nout) { /* insert */
      size_t k = next_random() % nout;
      block *b = out[k];
      out[k] = out[--nout];
      fresh_key(b, &next_addr);
      b->prio = next_random();
      free_index_insert(&root, b);
      in[nin++] = b;
    } else if (r == 1 && nin) { /* remove */
      size_t k = next_random() % nin;
      block *b = in[k];
      in[k] = in[--nin];
      free_index_remove(&root, b);
      out[nout++] = b;
    } else if (nin && nout) { /* replace: a nearby key fits, a far one may not */
      size_t k = next_random() % nin, j = next_random() % nout;
      block *old = in[k], *b = out[j];
      b->size = next_random() % 2 ? old->size : 512 * (1 + next_random() % 64);
      b->addr = old->addr + (next_random() % 2 ? 1 : (uintptr_t)-1);
      int fits = 1, taken = 0;
      for (size_t i = 0; i < nin; i++) {
        taken |= !key_less(in[i], b) && !key_less(b, in[i]);
        if (in[i] != old && (key_less(in[i], old) != key_less(in[i], b)))
          fits = 0; /* some block sorts between old and b */
      }
      if (taken) /* keys are unique in a pool: blocks do not overlap */
        continue;
      int rc = key_less(b, old) ? free_index_shrink(&root, old, b) : free_index_grow(&root, old, b);
      cr_assert_eq(rc == 0, fits, "replace %s a key that %s",
                   rc == 0 ? "took old's place for" : "removed and inserted",
                   fits ? "fits" : "does not fit");
      in[k] = b; /* either way old left and b entered */
      out[j] = old;
      if (rc == 0)
        replaced++;
      else
        refused++;
    }
    check(root, in, nin);
    if (nin) { /* lower bound: the smallest block of at least size */
      size_t size = 512 * (1 + next_random() % 70);
      const block *want = NULL;
      for (size_t i = 0; i < nin; i++)
        if (in[i]->size >= size && (!want || key_less(in[i], want)))
          want = in[i];
      cr_assert_eq(free_index_lower_bound(root, size), want);
    }
  }
  cr_assert_gt(replaced, 1000, "the in-place path ran %d times", replaced);
  cr_assert_gt(refused, 1000, "the remove-and-insert path ran %d times", refused);
}

/* Walks the iterator from the lower bound of size and checks it against
 * want[] (sorted): the blocks of at least size, in order. */
static void check_walk(block *root, block **want, size_t n, size_t size) {
  free_index_iter it;
  size_t i = 0;
  while (i < n && want[i]->size < size)
    i++;
  for (block *b = free_index_iter_start(&it, root, size); b; b = free_index_iter_next(&it), i++) {
    cr_assert_lt(i, n, "the walk from size %zu goes past the last block", size);
    cr_assert_eq(b, want[i], "block %zu of the walk from size %zu is not the expected one", i,
                 size);
  }
  cr_assert_eq(i, n, "the walk from size %zu stopped at block %zu of %zu", size, i, n);
  cr_assert_null(free_index_iter_next(&it), "a finished walk stays finished");
}

Test(free_index, iterator_walks_in_order_from_any_lower_bound) {
  static block nodes[NODES];
  block *in[NODES];
  uintptr_t next_addr = 0;
  block *root = NULL;
  for (size_t i = 0; i < NODES; i++) {
    fresh_key(&nodes[i], &next_addr);
    nodes[i].prio = next_random();
    nodes[i].state = BLOCK_FREE;
    free_index_insert(&root, &nodes[i]);
    in[i] = &nodes[i];
  }
  qsort(in, NODES, sizeof *in, cmp_blocks);
  for (size_t size = 0; size <= 512 * 66; size += 256)
    check_walk(root, in, NODES, size);
}

/* A treap deeper than the iterator's stack (priorities falling with the
 * keys: a chain of left children): the walk goes on with free_index_next. */
Test(free_index, iterator_walks_a_path_deeper_than_its_stack) {
  enum { N = FREE_INDEX_ITER_DEPTH * 3 };
  static block nodes[N];
  block *in[N], *root = NULL;
  for (size_t i = 0; i < N; i++) { /* largest key first, each one a left child of the last */
    nodes[i].size = 512 * (N - i);
    nodes[i].addr = 4096 * (N - i);
    nodes[i].prio = (uint32_t)(N - i);
    nodes[i].state = BLOCK_FREE;
    free_index_insert(&root, &nodes[i]);
    in[N - 1 - i] = &nodes[i];
  }
  size_t depth = 0;
  for (const block *t = root; t; t = t->left)
    depth++;
  cr_assert_eq(depth, N, "the treap is a chain of %zu left children", depth);
  check_walk(root, in, N, 0);
  check_walk(root, in, N, 512 * 10);
  check_walk(root, in, N, 512 * (N - 10));
}

/* Walks from the lower bound of size as the search over mapped pages does
 * (free_index_lower_bound_up, then free_index_iter_from) and checks it
 * against want[] (sorted), as check_walk does. */
static void check_walk_from(block *root, block **want, size_t n, size_t size) {
  free_index_iter it;
  size_t i = 0;
  while (i < n && want[i]->size < size)
    i++;
  block *up, *b = free_index_lower_bound_up(root, size, &up);
  cr_assert_eq(b, free_index_lower_bound(root, size));
  if (!b) {
    cr_assert_eq(i, n, "no lower bound of size %zu, yet block %zu fits", size, i);
    return;
  }
  free_index_iter_from(&it, root, b, up);
  for (; b; b = free_index_iter_next(&it), i++) {
    cr_assert_lt(i, n, "the walk from size %zu goes past the last block", size);
    cr_assert_eq(b, want[i], "block %zu of the walk from size %zu is not the expected one", i,
                 size);
  }
  cr_assert_eq(i, n, "the walk from size %zu stopped at block %zu of %zu", size, i, n);
  cr_assert_null(free_index_iter_next(&it), "a finished walk stays finished");
}

/* up is the lower bound's nearest ancestor whose left subtree holds it:
 * after the lower bound's subtree, the walk goes on there. */
Test(free_index, lower_bound_up_and_a_walk_from_it_in_order) {
  static block nodes[NODES];
  block *in[NODES];
  uintptr_t next_addr = 0;
  block *root = NULL;
  for (size_t i = 0; i < NODES; i++) {
    fresh_key(&nodes[i], &next_addr);
    nodes[i].prio = next_random();
    nodes[i].state = BLOCK_FREE;
    free_index_insert(&root, &nodes[i]);
    in[i] = &nodes[i];
  }
  qsort(in, NODES, sizeof *in, cmp_blocks);
  for (size_t size = 0; size <= 512 * 66; size += 256) {
    block *up, *b = free_index_lower_bound_up(root, size, &up);
    if (b) { /* up: the first block after b's subtree */
      const block *last = b;
      while (last->right)
        last = last->right;
      cr_assert_eq(up, free_index_next(root, last), "size %zu: up is not after b's subtree", size);
    }
    check_walk_from(root, in, NODES, size);
  }
}

/* Treaps deeper than the walk's stack: a chain of left children, whose
 * ancestors above the lower bound overflow it (free_index_iter_above), and
 * the same chain as the right subtree of the smallest block, whose left
 * spine overflows it (free_index_iter_next): the walk goes on with
 * free_index_next. */
Test(free_index, a_walk_from_a_lower_bound_deeper_than_the_stack) {
  enum { N = FREE_INDEX_ITER_DEPTH * 3 };
  static block nodes[N + 1];
  block *in[N + 1], *root = NULL;
  for (size_t i = 0; i < N; i++) { /* largest key first, each one a left child of the last */
    nodes[i].size = 512 * (N - i + 1);
    nodes[i].addr = 4096 * (N - i + 1);
    nodes[i].prio = (uint32_t)(N - i);
    nodes[i].state = BLOCK_FREE;
    free_index_insert(&root, &nodes[i]);
    in[N - i] = &nodes[i];
  }
  check_walk_from(root, in + 1, N, 0);
  check_walk_from(root, in + 1, N, 512 * 10);
  check_walk_from(root, in + 1, N, 512 * (N - 10));
  nodes[N].size = 512; /* the smallest, above them all */
  nodes[N].addr = 4096;
  nodes[N].prio = UINT32_MAX;
  nodes[N].state = BLOCK_FREE;
  free_index_insert(&root, &nodes[N]);
  in[0] = &nodes[N];
  cr_assert_eq(root, &nodes[N]);
  check_walk_from(root, in, N + 1, 0);
}

/* free_index_shrink_size, with the predecessor given, found in the left
 * subtree or by the descent: the treap stays sorted either way. */
Test(free_index, shrinking_a_size_in_place_or_anew_keeps_the_treap_sorted) {
  static block nodes[NODES];
  block *in[NODES];
  uintptr_t next_addr = 0;
  block *root = NULL;
  for (size_t i = 0; i < NODES; i++) {
    fresh_key(&nodes[i], &next_addr);
    nodes[i].size += 512 * 64; /* room to shrink */
    nodes[i].prio = next_random();
    nodes[i].state = BLOCK_FREE;
    free_index_insert(&root, &nodes[i]);
    in[i] = &nodes[i];
  }
  for (int op = 0; op < 20000; op++) {
    qsort(in, NODES, sizeof *in, cmp_blocks);
    size_t k = next_random() % NODES;
    block *b = in[k];
    if (b->size <= 512)
      continue;
    size_t size =
        next_random() % 2 ? b->size - 512 : 512 * (1 + next_random() % (b->size / 512 - 1));
    const block *pred = k && next_random() % 2 ? in[k - 1] : NULL;
    free_index_shrink_size(&root, b, size, pred);
    cr_assert_eq(b->size, size);
    check(root, in, NODES);
    if (b->size < 512 * 8) { /* keep sizes from running out */
      free_index_remove(&root, b);
      b->size += 512 * 64;
      free_index_insert(&root, b);
    }
  }
}
