/* Allocation tags: the process-wide table of tag names, the per-thread tag
 * stack and the per-pool sums (include/gpupool/tag.h). The hot path reads
 * the current tag id from pool_thread (pool.c) and counts block bytes per
 * tag in the shard (shard.c); this file does everything else. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "core/errors.h"
#include "gpupool/tag.h"
#include "pool_internal.h"
#include "pool_view.h"
#include "thread_state.h"

_Thread_local pool_thread_state pool_thread;

static char names[POOL_TAG_SLOTS][GPUPOOL_TAG_NAME_MAX + 1] = {[POOL_TAG_OTHER] = "other"};
static _Atomic unsigned nnamed; /* names[1 .. nnamed] are set, never changed */
static _Atomic int other_used;  /* a name found the table full */
static pthread_mutex_t add_lock = PTHREAD_MUTEX_INITIALIZER;

static int valid_name(const char *s, size_t n) {
  if (n == 0 || n > GPUPOOL_TAG_NAME_MAX)
    return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
          strchr("_.:/-", c)))
      return 0;
  }
  return 1;
}

static unsigned find(const char *tag, unsigned n) {
  for (unsigned i = 1; i <= n; i++)
    if (strcmp(names[i], tag) == 0)
      return i;
  return 0;
}

/* fork(): a thread of the parent may have held add_lock at the fork; the
 * names stay (a name is written whole before nnamed counts it), the lock
 * is made anew. */
static void unlock_in_child(void) {
  pthread_mutex_init(&add_lock, NULL);
}

static void register_atfork(void) {
  pthread_atfork(NULL, NULL, unlock_in_child);
}

/* The id of a valid name, adding it while there is room. "untagged" is the
 * name of no tag (0): it takes no slot, and its bytes are the untagged ones
 * every reader computes (the pool's allocated bytes less the tags'). */
static unsigned tag_id(const char *tag) {
  if (strcmp(tag, "untagged") == 0)
    return 0;
  if (strcmp(tag, "other") == 0) {
    atomic_store(&other_used, 1);
    return POOL_TAG_OTHER;
  }
  unsigned id = find(tag, atomic_load_explicit(&nnamed, memory_order_acquire));
  if (id)
    return id;
  static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&add_lock);
  unsigned n = atomic_load_explicit(&nnamed, memory_order_relaxed);
  if (!(id = find(tag, n))) {
    if (n + 1 < POOL_TAG_OTHER) {
      id = n + 1;
      strcpy(names[id], tag);
      atomic_store_explicit(&nnamed, id, memory_order_release);
    } else {
      id = POOL_TAG_OTHER;
      atomic_store(&other_used, 1);
    }
  }
  pthread_mutex_unlock(&add_lock);
  return id;
}

gpupool_status gpupool_tag_push(const char *tag) {
  if (!tag || !valid_name(tag, strnlen(tag, GPUPOOL_TAG_NAME_MAX + 1)))
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "gpupool_tag_push: a tag is 1 to %d characters of A-Z a-z 0-9 _ . : / -",
                     GPUPOOL_TAG_NAME_MAX);
  pool_thread_state *t = &pool_thread;
  if (t->depth == GPUPOOL_TAG_DEPTH)
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "gpupool_tag_push: tags nest at most %d deep on a thread", GPUPOOL_TAG_DEPTH);
  unsigned id = tag_id(tag);
  t->stack[t->depth++] = t->tag;
  t->tag = (uint8_t)id;
  return GPUPOOL_OK;
}

gpupool_status gpupool_tag_pop(void) {
  pool_thread_state *t = &pool_thread;
  if (t->depth == 0)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_tag_pop: no tag pushed on this thread");
  t->tag = t->stack[--t->depth];
  return GPUPOOL_OK;
}

const char *pool_tag_name(unsigned id) {
  return id && id < POOL_TAG_SLOTS ? names[id] : NULL;
}

const char *gpupool_tag_current(void) {
  return pool_tag_name(pool_thread.tag);
}

int gpupool_get_tag_stats(gpupool *p, gpupool_tag_stat *out, int max) {
  if (!p || (!out && max > 0)) {
    pool_fail(GPUPOOL_ERR_INVALID, "gpupool_get_tag_stats: %s is NULL", p ? "out" : "pool");
    return -1;
  }
  if (pool_check_not_inherited(p, "gpupool_get_tag_stats") != GPUPOOL_OK)
    return -1;
  int64_t sum[POOL_TAG_SLOTS] = {0};
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    for (unsigned i = 1; i < POOL_TAG_SLOTS; i++)
      sum[i] += sh->tag_bytes[i];
    spin_unlock(&sh->lock);
  }
  unsigned n = atomic_load_explicit(&nnamed, memory_order_acquire);
  int k = 0;
  for (unsigned i = 1; i <= n && k < max; i++)
    out[k++] = (gpupool_tag_stat){names[i], sum[i]};
  if ((atomic_load(&other_used) || sum[POOL_TAG_OTHER]) && k < max)
    out[k++] = (gpupool_tag_stat){names[POOL_TAG_OTHER], sum[POOL_TAG_OTHER]};
  return k;
}
