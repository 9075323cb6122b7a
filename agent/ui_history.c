#include "ui_history.h"

#include <pthread.h>
#include <stdlib.h>

#include "cupti.h"
#include "core/clock.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static ui_history_sample ring[UI_HISTORY_CAPACITY];
static uint64_t head; /* samples ever written */

void ui_history_sample_now(void) {
  cupti_metrics *m = malloc(sizeof *m); /* large: not on the sampler's stack */
  if (!m)
    return;
  cupti_get_metrics(m);
  uint64_t now = clock_realtime_ns();
  pthread_mutex_lock(&lock);
  for (size_t i = 0; m->up && i < m->ndevices && i < CUPTI_MAX_DEVICES; i++) {
    const cupti_device_metrics *d = &m->devices[i];
    if (d->device < 0)
      continue; /* host memory */
    ui_history_sample s = {.ts_ns = now, .device = d->device};
    for (int k = 0; k < CUPTI_MEMORY_KINDS; k++) {
      s.pool_bytes += d->live_bytes[k][0];
      s.other_bytes += d->live_bytes[k][1];
    }
    ring[head++ % UI_HISTORY_CAPACITY] = s;
  }
  pthread_mutex_unlock(&lock);
  free(m);
}

size_t ui_history_read(uint64_t since_ns, ui_history_sample *out, size_t max) {
  size_t n = 0;
  pthread_mutex_lock(&lock);
  uint64_t first = head > UI_HISTORY_CAPACITY ? head - UI_HISTORY_CAPACITY : 0;
  for (uint64_t i = first; i < head && n < max; i++) {
    const ui_history_sample *s = &ring[i % UI_HISTORY_CAPACITY];
    if (s->ts_ns >= since_ns)
      out[n++] = *s;
  }
  pthread_mutex_unlock(&lock);
  return n;
}

void ui_history_clear(void) {
  pthread_mutex_lock(&lock);
  head = 0;
  pthread_mutex_unlock(&lock);
}
