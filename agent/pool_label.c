#include "pool_label.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "labels.h"
#include "core/array_grow.h"
#include "pool/backend.h"
#include "pool/pool_view.h"

typedef struct pool_labelled {
  const char *name; /* the pool's own, alive while the registry lock is held */
  int device, simulated;
  uint32_t id;
  char label[POOL_LABEL_MAX]; /* the label it was given */
} pool_labelled;

/* Whether a pool labelled before on me's device and kind has this label. */
static int label_taken(const pool_labeler *l, const pool_labelled *me, const char *label) {
  for (size_t i = 0; i < l->n; i++)
    if (l->seen[i].device == me->device && l->seen[i].simulated == me->simulated &&
        strcmp(l->seen[i].label, label) == 0)
      return 1;
  return 0;
}

/* Appends "#ordinal" to label, cutting the name short (at a character
 * boundary) where both would not fit. */
static void add_ordinal(char *label, size_t ordinal) {
  char suffix[24];
  size_t k = (size_t)snprintf(suffix, sizeof suffix, "#%zu", ordinal);
  size_t len = strlen(label);
  if (len + k >= POOL_LABEL_MAX) {
    len = POOL_LABEL_MAX - k - 1;
    while (len && ((unsigned char)label[len] & 0xC0) == 0x80)
      len--;
  }
  memcpy(label + len, suffix, k + 1);
}

int pool_labeler_next(pool_labeler *l, gpupool *p, char *label) {
  if (array_grow((void **)&l->seen, &l->cap, l->n + 1, sizeof *l->seen, 16) != 0)
    return -1;
  pool_labelled *me = &l->seen[l->n];
  *me = (pool_labelled){gpupool_name(p) ? gpupool_name(p) : "default", gpupool_device(p),
                        backend_is_host(pool_get_backend(p)), pool_id(p), ""};
  /* The ordinal counts names, never labels: a third "bfc" is "bfc#3". */
  size_t same = 0;
  for (size_t i = 0; i < l->n; i++)
    same += l->seen[i].device == me->device && l->seen[i].simulated == me->simulated &&
            strcmp(l->seen[i].name, me->name) == 0;
  /* A pool may be named like another's label ("bfc#2" beside two "bfc"):
   * the ordinal goes up until the label is its own, so that no two series
   * of one device share one. */
  char base[POOL_LABEL_MAX];
  utf8_sanitize(me->name, base, POOL_LABEL_MAX);
  for (size_t ordinal = same + 1;; ordinal++) {
    memcpy(me->label, base, POOL_LABEL_MAX);
    if (ordinal > 1)
      add_ordinal(me->label, ordinal);
    if (!label_taken(l, me, me->label))
      break;
  }
  memcpy(label, me->label, POOL_LABEL_MAX);
  l->n++;
  return 0;
}

int pool_labeler_saw(const pool_labeler *l, uint32_t id) {
  for (size_t i = 0; i < l->n; i++)
    if (l->seen[i].id == id)
      return 1;
  return 0;
}

void pool_labeler_free(pool_labeler *l) {
  free(l->seen);
  memset(l, 0, sizeof *l);
}

int pool_label_selects(const char *want, int want_device, const char *label, int device) {
  return (want_device < 0 || device == want_device) && (!want || !label || !strcmp(want, label));
}
