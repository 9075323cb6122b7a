/* The CUPTI activity buffer set: see cupti_buffers.h. */
#include "cupti_buffers.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

enum { BUF_FREE = 0, BUF_IN_CUPTI, BUF_USED, BUF_ZEROING };

static uint8_t *g_base; /* CUPTI_BUFFER_COUNT * CUPTI_BUFFER_SIZE, page-aligned */
static atomic_int g_state[CUPTI_BUFFER_COUNT];
static atomic_uint_fast64_t g_exhausted;
static pthread_mutex_t g_init_lock = PTHREAD_MUTEX_INITIALIZER;

int cupti_buffers_init(void) {
  pthread_mutex_lock(&g_init_lock);
  if (!g_base) {
    /* Anonymous pages come zeroed. */
    void *p = mmap(NULL, (size_t)CUPTI_BUFFER_COUNT * CUPTI_BUFFER_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED)
      g_base = p;
  }
  pthread_mutex_unlock(&g_init_lock);
  return g_base ? 0 : -1;
}

static uint8_t *buffer(int i) {
  return g_base + (size_t)i * CUPTI_BUFFER_SIZE;
}

static int index_of(const uint8_t *buf) {
  if (!g_base || buf < g_base)
    return -1;
  size_t off = (size_t)(buf - g_base);
  if (off % CUPTI_BUFFER_SIZE || off / CUPTI_BUFFER_SIZE >= CUPTI_BUFFER_COUNT)
    return -1;
  return (int)(off / CUPTI_BUFFER_SIZE);
}

/* Claims a buffer in state from; returns its index or -1. */
static int claim(int from) {
  for (int i = 0; i < CUPTI_BUFFER_COUNT; i++) {
    int expected = from;
    if (atomic_load_explicit(&g_state[i], memory_order_relaxed) == from &&
        atomic_compare_exchange_strong(&g_state[i], &expected, BUF_IN_CUPTI))
      return i;
  }
  return -1;
}

uint8_t *cupti_buffers_take(int *low) {
  *low = 0;
  if (!g_base)
    return NULL;
  int i = claim(BUF_FREE);
  if (i < 0) {
    /* None zeroed yet: zero a used one here rather than drop records. */
    i = claim(BUF_USED);
    if (i >= 0)
      memset(buffer(i), 0, CUPTI_BUFFER_SIZE);
  }
  if (i < 0) {
    atomic_fetch_add(&g_exhausted, 1);
    *low = 1;
    return NULL;
  }
  *low = cupti_buffers_free_count() < CUPTI_BUFFER_COUNT / 4;
  return buffer(i);
}

void cupti_buffers_done(uint8_t *buf) {
  int i = index_of(buf);
  if (i >= 0)
    atomic_store(&g_state[i], BUF_USED);
}

int cupti_buffers_owns(const uint8_t *buf) {
  return index_of(buf) >= 0;
}

void cupti_buffers_rezero(void) {
  for (int i = 0; i < CUPTI_BUFFER_COUNT; i++) {
    int expected = BUF_USED;
    if (!atomic_compare_exchange_strong(&g_state[i], &expected, BUF_ZEROING))
      continue;
    memset(buffer(i), 0, CUPTI_BUFFER_SIZE);
    atomic_store(&g_state[i], BUF_FREE);
  }
}

uint64_t cupti_buffers_exhausted(void) {
  return atomic_load(&g_exhausted);
}

size_t cupti_buffers_free_count(void) {
  size_t n = 0;
  for (int i = 0; i < CUPTI_BUFFER_COUNT; i++)
    if (atomic_load_explicit(&g_state[i], memory_order_relaxed) == BUF_FREE)
      n++;
  return n;
}
