/* Simulated streams for the host backend (see backend_host_stream.h). */
#include "backend_host_stream.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/errors.h"
#include "gpupool/host.h"

struct gpupool_host_stream {
  _Atomic uint64_t enqueued;
  _Atomic uint64_t completed;
  /* One reference for the owner until destroy, one per pending event, so an
   * event outliving its stream never reads freed memory. */
  _Atomic unsigned refs;
  gpupool_host_stream *next; /* live-stream list, under live_lock */
};

typedef struct host_event {
  gpupool_host_stream *stream;
  uint64_t target; /* complete when stream->completed >= target */
} host_event;

/* Events recorded on NULL, on unknown pointers or on idle streams: always
 * complete, never allocated. */
static char always_complete_event;

/* Live streams, so that an event recorded on a pointer that is not a host
 * stream is recognised instead of dereferenced. A list: record happens only on
 * the record_stream free path, and programs use a handful of streams. */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static gpupool_host_stream *live_head;

static void stream_release(gpupool_host_stream *s) {
  if (atomic_fetch_sub(&s->refs, 1) == 1)
    free(s);
}

/* Everything enqueued so far is done. completed only grows, even when two
 * threads complete the same stream at once. */
static void stream_complete(gpupool_host_stream *s) {
  uint64_t target = atomic_load(&s->enqueued);
  uint64_t done = atomic_load(&s->completed);
  while (done < target && !atomic_compare_exchange_weak(&s->completed, &done, target)) {
  }
}

/* Unlinks s from the live list; 0 if it was not there. Under live_lock. */
static int live_unlink(gpupool_host_stream *s) {
  for (gpupool_host_stream **pp = &live_head; *pp; pp = &(*pp)->next) {
    if (*pp == s) {
      *pp = s->next;
      return 1;
    }
  }
  return 0;
}

static int live_contains(const void *p) {
  for (gpupool_host_stream *s = live_head; s; s = s->next)
    if ((const void *)s == p)
      return 1;
  return 0;
}

/* fork(): a thread of the parent may have held live_lock at the fork; the
 * child's copy of the list is its own (simulated streams are host memory),
 * its lock made anew. The list is whole at every instant (an insert links
 * the new stream before publishing it, an unlink is one store), so a copy
 * taken mid-insert lacks at most the stream being added. */
static void unlock_in_child(void) {
  pthread_mutex_init(&live_lock, NULL);
}

static void register_atfork(void) {
  pthread_atfork(NULL, NULL, unlock_in_child);
}

gpupool_host_stream *gpupool_host_stream_create(void) {
  static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
  pthread_once(&atfork_once, register_atfork);
  gpupool_host_stream *s = calloc(1, sizeof *s);
  if (!s)
    return NULL;
  atomic_init(&s->refs, 1);
  pthread_mutex_lock(&live_lock);
  s->next = live_head;
  /* Release: a fork() from another thread between the two stores leaves
   * the child a list without s, never one that ends at s's unset link. */
  __atomic_store_n(&live_head, s, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&live_lock);
  return s;
}

void gpupool_host_stream_destroy(gpupool_host_stream *s) {
  if (!s)
    return;
  pthread_mutex_lock(&live_lock);
  int was_live = live_unlink(s);
  pthread_mutex_unlock(&live_lock);
  if (!was_live)
    return; /* unknown or already destroyed: nothing to do */
  /* Like cudaStreamDestroy: work already enqueued still finishes. */
  stream_complete(s);
  stream_release(s);
}

void gpupool_host_stream_enqueue(gpupool_host_stream *s) {
  if (s)
    atomic_fetch_add(&s->enqueued, 1);
}

void gpupool_host_stream_complete(gpupool_host_stream *s) {
  if (s)
    stream_complete(s);
}

gpupool_status host_stream_event_record(void *stream, void **event) {
  *event = &always_complete_event;
  if (!stream)
    return GPUPOOL_OK;
  host_event *e = malloc(sizeof *e);
  if (!e)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "host backend: out of host memory recording an event");
  pthread_mutex_lock(&live_lock);
  gpupool_host_stream *s = live_contains(stream) ? stream : NULL;
  if (s) {
    e->target = atomic_load(&s->enqueued);
    if (e->target > atomic_load(&s->completed)) {
      atomic_fetch_add(&s->refs, 1);
      e->stream = s;
      *event = e;
    }
  }
  pthread_mutex_unlock(&live_lock);
  if (*event != e)
    free(e);
  return GPUPOOL_OK;
}

int host_stream_event_query(void *event) {
  if (event == &always_complete_event)
    return 1;
  const host_event *e = event;
  return atomic_load(&e->stream->completed) >= e->target;
}

void host_stream_event_destroy(void *event) {
  if (!event || event == &always_complete_event)
    return;
  host_event *e = event;
  stream_release(e->stream);
  free(e);
}

void host_stream_complete_all(void) {
  pthread_mutex_lock(&live_lock);
  for (gpupool_host_stream *s = live_head; s; s = s->next)
    stream_complete(s);
  pthread_mutex_unlock(&live_lock);
}
