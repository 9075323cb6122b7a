#include "web_state.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

/* The reference count lives beside the configuration, in a wrapper that
 * starts with it, so that web_config stays plain data. */
typedef struct counted {
  web_config *c;
  int refs;
} counted;

#define MAX_LIVE 64 /* configurations still referenced by requests (a reload a second at most) */

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static counted g_live[MAX_LIVE];
static web_config *g_current;
static atomic_int g_healthz_open;

static counted *find(web_config *c) {
  for (int i = 0; i < MAX_LIVE; i++)
    if (g_live[i].c == c)
      return &g_live[i];
  return NULL;
}

static void unref_locked(web_config *c) {
  counted *k = c ? find(c) : NULL;
  if (k && --k->refs == 0) {
    web_config_free(k->c);
    k->c = NULL;
  }
}

int web_state_set(web_config *c, int healthz_open) {
  pthread_mutex_lock(&g_lock);
  if (c) {
    counted *slot = find(NULL);
    if (!slot) { /* every slot held by a request that never ends: keep the old one */
      pthread_mutex_unlock(&g_lock);
      web_config_free(c);
      return -1;
    }
    slot->c = c;
    slot->refs = 1;
  }
  if (g_current)
    unref_locked(g_current);
  g_current = c;
  atomic_store(&g_healthz_open, healthz_open);
  pthread_mutex_unlock(&g_lock);
  return 0;
}

web_config *web_state_acquire(void) {
  pthread_mutex_lock(&g_lock);
  web_config *c = g_current;
  if (c)
    find(c)->refs++; /* g_current always has its slot */
  pthread_mutex_unlock(&g_lock);
  return c;
}

web_config *web_state_ref(web_config *c) {
  pthread_mutex_lock(&g_lock);
  counted *k = c ? find(c) : NULL;
  if (k)
    k->refs++;
  pthread_mutex_unlock(&g_lock);
  return c;
}

void web_state_release(web_config *c) {
  if (!c)
    return;
  pthread_mutex_lock(&g_lock);
  unref_locked(c);
  pthread_mutex_unlock(&g_lock);
}

int web_state_healthz_open(void) {
  return atomic_load(&g_healthz_open);
}
