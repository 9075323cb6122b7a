/* Free blocks ordered by (size, address) in a treap: exact best fit (the
 * smallest block that fits, lowest address on ties) in O(log n). */
#ifndef GPUPOOL_FREE_INDEX_H
#define GPUPOOL_FREE_INDEX_H

#include <stddef.h>

#include "core/assert.h"

#include "pool_internal.h"

void free_index_insert(block **root, block *b);
void free_index_remove(block **root, block *b);
/* Free block old leaves the index and free block b (not in it) enters, b
 * sorting before old (shrink: a split's remainder) or after it (grow: a
 * block that absorbed old). When b's key sorts between old's neighbours it
 * takes old's place (no rotation, so it costs one descent where a remove and
 * an insert cost two and relink subtrees; only the neighbour on b's side
 * needs a look) and 0 is returned; else old is removed at the link found and
 * b inserted, and 1 is returned. */
int free_index_shrink(block **root, block *old, block *b);
int free_index_grow(block **root, block *old, block *b);
/* The smallest block with size >= size, or NULL. */
block *free_index_lower_bound(block *root, size_t size);
/* The block after b in (size, address) order, or NULL. */
block *free_index_next(block *root, const block *b);
block *free_index_largest(block *root);

/* An in-order walk of an index that does not change meanwhile, from the
 * smallest block of at least some size: the ancestors still to visit are
 * kept on a stack, so a step costs O(1) amortized where free_index_next
 * descends from the root. A treap's depth is about 2 ln n; a deeper path
 * (never seen in practice) makes the walk go on with free_index_next. */
#define FREE_INDEX_ITER_DEPTH 64
typedef struct free_index_iter {
  block *root, *cur;
  block *from; /* free_index_iter_from's block while its ancestors are not on the stack */
  unsigned n;
  int deep; /* the stack overflowed: free_index_next from here on */
  block *stack[FREE_INDEX_ITER_DEPTH];
} free_index_iter;

/* Starts it at free_index_lower_bound(root, size), which it returns. */
block *free_index_iter_start(free_index_iter *it, block *root, size_t size);
/* Starts it at b, the lower bound of its own size in the index under root
 * (free_index_lower_bound(root, b->size), as a best fit is), without a
 * descent: the walk goes through b's right subtree first, and descends from
 * the root for b's ancestors (free_index_iter_above) only if it goes on past
 * that. A caller that found b by a descent saves the second one where the
 * walk stops early. */
static inline void free_index_iter_from(free_index_iter *it, block *root, block *b) {
  it->root = root;
  it->cur = it->from = b;
  it->stack[0] = b;
  it->n = 1;
  it->deep = 0;
}
/* The block after it->from's subtree, with it->from's ancestors that follow
 * it pushed: free_index_iter_next's step out of that subtree. */
block *free_index_iter_above(free_index_iter *it);

static inline void free_index_iter_push(free_index_iter *it, block *b) {
  if (it->n < FREE_INDEX_ITER_DEPTH)
    it->stack[it->n++] = b;
  else
    it->deep = 1;
}

/* The block after the current one (NULL: none), which becomes current.
 * Inline: the search over mapped pages (shard.c) steps a few blocks per
 * request. */
static inline block *free_index_iter_next(free_index_iter *it) {
  if (!it->cur)
    return NULL;
  if (!it->deep) {
    gp_assert_internal(it->n && it->stack[it->n - 1] == it->cur);
    it->n--;
    for (block *t = it->cur->right; t; t = t->left)
      free_index_iter_push(it, t);
    if (!it->deep) {
      if (!it->n && it->from)
        return it->cur = free_index_iter_above(it);
      return it->cur = it->n ? it->stack[it->n - 1] : NULL;
    }
  }
  return it->cur = free_index_next(it->root, it->cur);
}

#endif
