#include "web_watch.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agent_health.h"
#include "http.h"
#include "core/clock.h"
#include "web_state.h"

static pthread_t g_thread;
static int g_started;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond;
static int g_stop;

static char g_path[PATH_MAX];
static web_files g_files;        /* the files of the last load attempted */
static unsigned char g_seen[32]; /* their digest then */
static unsigned char g_tls[32];  /* the TLS digest of the running server */
static int g_healthz_open;

static void reload(void) {
  char err[1024];
  web_config *c = NULL;
  double now = (double)clock_realtime_ns() / 1e9;
  int rc = web_config_load(g_path, (int64_t)now, &c, &g_files, err, sizeof err);
  /* What the load read, not the files now: a write that lands while it runs
   * changes them again and is loaded at the next tick. */
  memcpy(g_seen, g_files.digest, sizeof g_seen);
  if (rc == 0 && c->empty) {
    /* An empty file is most often one being rewritten (truncated, not yet
     * written): it must not turn TLS and basic auth off. */
    web_config *run = web_state_acquire();
    int guarded = run && (run->tls || run->nusers || run->rate_interval_s > 0);
    web_state_release(run);
    if (guarded) {
      web_config_free(c);
      snprintf(err, sizeof err,
               "web_config %.900s: the file is empty (write {} to turn TLS and basic auth off)",
               g_path);
      rc = -1;
    }
  }
  if (rc != 0) {
    agent_health_web_config(0, now);
    fprintf(stderr, "gpupool agent: %s; keeping the last good configuration\n", err);
    return;
  }
  int restart = memcmp(c->tls_digest, g_tls, sizeof g_tls) != 0;
  unsigned char tls[32];
  memcpy(tls, c->tls_digest, sizeof tls);
  web_config *prev = restart ? web_state_acquire() : NULL; /* back if the restart fails */
  if (web_state_set(c, g_healthz_open) != 0) {             /* c freed */
    if (prev)
      web_state_release(prev);
    agent_health_web_config(0, now);
    fprintf(stderr,
            "gpupool agent: web_config %s: too many configurations still in use; "
            "keeping the last good one\n",
            g_path);
    return;
  }
  if (restart) {
    /* c stays alive: web_state holds it until the next reload. */
    if (http_restart(c, err, sizeof err) != 0) {
      /* Users, headers and limits go back with the TLS server: no half of
       * the new file applies. */
      if (web_state_set(prev, g_healthz_open) != 0)
        fprintf(stderr,
                "gpupool agent: web_config %s: the previous users and headers could "
                "not be put back (too many configurations still in use)\n",
                g_path);
      agent_health_web_config(0, now);
      fprintf(stderr, "gpupool agent: web_config %s: %s\n", g_path, err);
      return;
    }
    if (prev)
      web_state_release(prev);
    memcpy(g_tls, tls, sizeof g_tls);
  }
  agent_health_web_config(1, now);
  fprintf(stderr, "gpupool agent: web_config %s reloaded%s\n", g_path,
          restart ? " (TLS server restarted on the same socket)" : "");
}

static void *watch_main(void *arg) {
  (void)arg;
  pthread_mutex_lock(&g_lock);
  while (!g_stop) {
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_nsec += (long)(WEB_WATCH_INTERVAL_MS % 1000) * 1000000L;
    until.tv_sec += WEB_WATCH_INTERVAL_MS / 1000 + until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (!g_stop && pthread_cond_timedwait(&g_cond, &g_lock, &until) != ETIMEDOUT) {
    }
    if (g_stop)
      break;
    pthread_mutex_unlock(&g_lock);
    unsigned char now[32];
    web_files_digest(&g_files, now);
    if (memcmp(now, g_seen, sizeof now) != 0)
      reload();
    pthread_mutex_lock(&g_lock);
  }
  pthread_mutex_unlock(&g_lock);
  return NULL;
}

int web_watch_start(const char *path, const web_config *running, const web_files *files,
                    int healthz_open, char *err, size_t errlen) {
  if (g_started) {
    snprintf(err, errlen, "the web_config watcher is already running");
    return -1;
  }
  snprintf(g_path, sizeof g_path, "%s", path);
  g_files = *files;
  memcpy(g_seen, files->digest, sizeof g_seen); /* as read by the start's load */
  memcpy(g_tls, running->tls_digest, sizeof g_tls);
  g_healthz_open = healthz_open;
  g_stop = 0;
  pthread_condattr_t a;
  pthread_condattr_init(&a);
  pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
  pthread_cond_init(&g_cond, &a);
  pthread_condattr_destroy(&a);
  int rc = pthread_create(&g_thread, NULL, watch_main, NULL);
  if (rc != 0) {
    pthread_cond_destroy(&g_cond);
    snprintf(err, errlen, "cannot start the web_config watcher thread: %s", strerror(rc));
    return -1;
  }
  g_started = 1;
  return 0;
}

void web_watch_stop(void) {
  if (!g_started)
    return;
  pthread_mutex_lock(&g_lock);
  g_stop = 1;
  pthread_cond_signal(&g_cond);
  pthread_mutex_unlock(&g_lock);
  pthread_join(g_thread, NULL);
  pthread_cond_destroy(&g_cond);
  g_started = 0;
}
