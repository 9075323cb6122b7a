/* The `pool` label of a live pool, as /metrics writes it, and the one rule
 * by which every endpoint's pool= parameter picks pools (/trace, /snapshot,
 * /advice, the /ui page): a value selects the pools whose label it is.
 * A pool is labelled by its name; when pools of one name share a device (the
 * same ordinal, both real or both simulated), the second and later ones in
 * creation order are "name#2", "name#3", ..., so that their series stay
 * distinct and a label names one pool per device. A label another pool of
 * the device has already (a pool named "bfc#2" beside two named "bfc") takes
 * the next ordinal that makes it its own ("bfc#3", or "bfc#2#2" for the pool
 * named "bfc#2" when the second "bfc" came first). */
#ifndef GPUPOOL_POOL_LABEL_H
#define GPUPOOL_POOL_LABEL_H

#include <stddef.h>
#include <stdint.h>

#include "gpupool/gpupool.h"

#define POOL_LABEL_MAX 128 /* bytes, with the NUL */

/* The pools a registry walk has labelled so far. Zero-initialise. */
typedef struct pool_labeler {
  struct pool_labelled *seen;
  size_t n, cap;
} pool_labeler;

/* The label of p, the next pool of a registry walk (registry_foreach: every
 * live pool once, in creation order, under the registry lock, which keeps
 * the names the labeler holds alive), into label (POOL_LABEL_MAX bytes).
 * 0, or -1 when out of host memory (no label then). */
int pool_labeler_next(pool_labeler *l, gpupool *p, char *label);
/* 1 if the walk labelled the pool of this id (pool_id): a pool live then.
 * Also after the walk, until pool_labeler_free. */
int pool_labeler_saw(const pool_labeler *l, uint32_t id);
void pool_labeler_free(pool_labeler *l);

/* Why a pool= value selects no live pool, for a 400. */
#define POOL_LABEL_UNKNOWN                                                                         \
  "no live pool has this name or label (the label /metrics gives it: name#2, name#3, ... for "     \
  "pools that share a name on a device)"

/* Whether a request's pool= (want: NULL, no parameter, every pool) and
 * device= (want_device: -1, every device) select the pool labelled label
 * on device; label NULL: a pool the labeler could not label (out of host
 * memory), selected by its device alone. */
int pool_label_selects(const char *want, int want_device, const char *label, int device);

#endif
