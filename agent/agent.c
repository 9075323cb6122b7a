/* gpupool_agent_start/stop: the agent's lifecycle. Start validates the whole
 * configuration and opens the listening socket before it starts anything,
 * then starts, in order, event recording (with the event clock's ticker), the
 * CUPTI subscriber, the sampler thread and the HTTP server;
 * a failure undoes what was started, leaves a status, one line on stderr and
 * a program that runs on. Stop undoes it all in reverse order and writes the
 * trace file; an exit handler stops an agent still running at exit. */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent_conf.h"
#include "advice.h"
#include "agent_health.h"
#include "cupti.h"
#include "metrics.h"
#include "trace_writer.h"
#include "exporters/metrics_pools.h"
#include "gpupool/agent.h"
#include "http.h"
#include "http_listen.h"
#include "oom_store.h"
#include "core/clock.h"
#include "core/errors.h"
#include "pool/event_clock.h"
#include "pool/pool_view.h"
#include "sampler.h"
#include "sd_file.h"
#include "web_auth.h"
#include "web_config.h"
#include "web_state.h"
#include "web_watch.h"
#include "writable_dir.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_running;
static pid_t g_owner; /* the process that started the agent (0: none) */
static agent_config g_cfg;
static char g_sd_path[PATH_MAX + 64];
static int g_exit_handler;

/* Fails with status s: the reason goes to gpupool_last_error(), which the
 * caller prints (the library does not, so each error reads once). */
static gpupool_status agent_fail(gpupool_status s, const char *reason) {
  return pool_fail(s, "gpupool agent: %s", reason);
}

/* Event recording and the clock that stamps the events (pool/event_clock.h):
 * the ticker is a convenience, so a ticker that cannot start leaves exact
 * stamps and one line on stderr, not a failed start. */
static void start_events(const agent_config *c) {
  if (!c->trace_events)
    return;
  pool_events_enable(c->trace_events);
  if (event_clock_start(c->trace_tick_us) != 0)
    fprintf(stderr, "gpupool agent: the event clock's ticker thread could not start: every "
                    "event is stamped exactly\n");
}

static void stop_events(const agent_config *c) {
  if (!c->trace_events)
    return;
  event_clock_stop();
  pool_events_disable();
}

/* finished: the agent ran (write the trace file), as opposed to a start
 * that failed half-way. */
static void stop_locked(int finished) {
  web_watch_stop();
  http_stop();
  metrics_release();
  oom_store_stop();
  web_state_set(NULL, 0);
  web_auth_reset();
  sampler_stop();
  cupti_stop();
  if (finished && g_cfg.trace_file[0])
    trace_write_file(g_cfg.trace_file); /* says why on stderr if it cannot */
  stop_events(&g_cfg);
  advice_reset();
  sd_file_remove(g_sd_path);
  g_sd_path[0] = '\0';
  g_running = 0;
}

static void before_fork(void);
static void after_fork(void);

static void register_atfork(void) {
  pthread_atfork(before_fork, after_fork, after_fork);
}

static void stop_at_exit(void) {
  gpupool_agent_stop();
}

static int on_loopback(const http_listener *l) {
  return !strncmp(l->address, "127.", 4) || !strncmp(l->address, "[::1]", 5);
}

/* Listening beyond loopback without TLS or without authentication: say so. */
static void warn_exposed(const http_listener *l, const web_config *web) {
  if (on_loopback(l))
    return;
  int tls = web && web->tls;
  int auth = web && (web->nusers || web->client_auth == WEB_CLIENT_REQUIRE_AND_VERIFY);
  if (tls && auth)
    return;
  fprintf(stderr,
          "gpupool agent: warning: listening on %s without %s: anyone who can reach it can "
          "read /metrics, /trace and /snapshot; set web_config (docs/security.md)\n",
          l->address,
          !tls && !auth ? "TLS or authentication"
          : !tls        ? "TLS (passwords travel in clear)"
                        : "authentication");
}

/* Everything after the configuration, in order; on failure what was started
 * is stopped again. web (a loaded web configuration or NULL) is taken over. */
static gpupool_status start_locked(const agent_config *c, web_config *web, const web_files *files) {
  char err[1024];
  /* A busy port or a bad address fails the start before CUPTI is touched. */
  http_listener l = {.fd = -1};
  if (!c->listen_off &&
      http_listen_open(c->listen_host, c->listen_port, &l, err, sizeof err) != 0) {
    web_config_free(web);
    return agent_fail(GPUPOOL_ERR_BACKEND, err);
  }
  metrics_configure(c->hostname, &c->labels);
  metrics_pools_size_buckets(c->size_buckets_classic);
  metrics_gzip_threads(c->gzip_threads);
  agent_health_reset((double)clock_realtime_ns() / 1e9);
  start_events(c);
  gpupool_status s = cupti_start(c->cupti);
  if (s != GPUPOOL_OK) { /* cupti:force; the CUPTI module printed its line */
    char why[600];
    snprintf(why, sizeof why, "%s", gpupool_last_error());
    stop_events(c);
    if (l.fd >= 0)
      close(l.fd);
    web_config_free(web);
    return pool_fail(s, "gpupool agent: cupti:force and CUPTI could not start: %s", why);
  }
  if (sampler_start(c->sample_interval_ms, err, sizeof err) != 0) {
    cupti_stop();
    stop_events(c);
    if (l.fd >= 0)
      close(l.fd);
    web_config_free(web);
    return agent_fail(GPUPOOL_ERR_BACKEND, err);
  }
  g_running = 1; /* from here on, stop_locked undoes everything */
  oom_store_start(c->oom_reports, c->oom_dir, c->oom_dir_max);
  web_auth_reset();
  if (web) {
    web_state_set(web, c->healthz_open); /* the first one always has a slot */
    agent_health_web_config(1, (double)clock_realtime_ns() / 1e9);
  }
  /* A loopback listener answers the Host names of this machine only
   * (host_guard.h): its own name, as the hostname label and the system
   * give it, and the names of allowed_hosts. */
  host_guard guard = c->allowed_hosts;
  char system_name[256] = "";
  gethostname(system_name, sizeof system_name - 1);
  host_guard_add(&guard, c->hostname);
  host_guard_add(&guard, system_name);
  int guarded = on_loopback(&l) && !guard.any;
  if (!c->listen_off && http_start(&l, web, guarded ? &guard : NULL, err, sizeof err) != 0) {
    stop_locked(0);
    return agent_fail(GPUPOOL_ERR_BACKEND, err);
  }
  if (!c->listen_off)
    warn_exposed(&l, web);
  if (web && web_watch_start(c->web_config, web, files, c->healthz_open, err, sizeof err) != 0) {
    stop_locked(0);
    return agent_fail(GPUPOOL_ERR_BACKEND, err);
  }
  if (c->sd_dir[0]) {
    const char *host = c->listen_host;
    int wildcard = !*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
    if (sd_file_write(c->sd_dir, c->hostname, http_address(), wildcard, http_port(), &c->labels,
                      g_sd_path, sizeof g_sd_path, err, sizeof err) != 0) {
      stop_locked(0);
      return agent_fail(GPUPOOL_ERR_INVALID, err);
    }
  }
  return GPUPOOL_OK;
}

/* fork() while another thread holds g_lock would leave it locked forever in
 * the child: hold it across the fork. */
static void before_fork(void) {
  pthread_mutex_lock(&g_lock);
}
static void after_fork(void) {
  pthread_mutex_unlock(&g_lock);
}

gpupool_status gpupool_agent_conf_check(const char *conf) {
  char err[1024];
  agent_config c;
  return agent_config_resolve_conf(conf, &c, err, sizeof err) == 0
             ? GPUPOOL_OK
             : agent_fail(GPUPOOL_ERR_INVALID, err);
}

gpupool_status gpupool_agent_start(const gpupool_agent_options *opt) {
  static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
  pthread_once(&atfork_once, register_atfork);
  pthread_mutex_lock(&g_lock);
  if (g_running && g_owner != getpid()) {
    /* A forked child: the parent's server and sampler threads do not exist
     * here, and their state cannot be reused. */
    pthread_mutex_unlock(&g_lock);
    return agent_fail(GPUPOOL_ERR_UNSUPPORTED,
                      "the agent was running when this process was forked; it cannot be "
                      "started again in the child");
  }
  if (g_running) {
    char why[64];
    snprintf(why, sizeof why, "already running (port %d)", http_port());
    pthread_mutex_unlock(&g_lock);
    return agent_fail(GPUPOOL_ERR_INVALID, why);
  }
  char err[1024];
  agent_config c;
  if (agent_config_resolve(opt, &c, err, sizeof err) != 0) {
    pthread_mutex_unlock(&g_lock);
    return agent_fail(GPUPOOL_ERR_INVALID, err);
  }
  int why = c.oom_dir[0] ? writable_dir_errno(c.oom_dir) : 0;
  if (why) {
    snprintf(err, sizeof err, "oom_dir '%.400s' is not a writable directory: %s", c.oom_dir,
             strerror(why));
    pthread_mutex_unlock(&g_lock);
    return agent_fail(GPUPOOL_ERR_INVALID, err);
  }
  /* trace_file is written at stop, when nothing can be done about it: a
   * directory that cannot take it fails the start instead. Checked, not
   * opened: the trace goes to a temporary file renamed over trace_file at
   * stop (a reader never sees half of one, an earlier trace stays until the
   * new one is whole), and opening now would create or truncate the file,
   * left empty if the program dies. A directory removed later still fails
   * at stop, with a line on stderr. */
  if (c.trace_file[0] && trace_file_check(c.trace_file, err, sizeof err) != 0) {
    pthread_mutex_unlock(&g_lock);
    return agent_fail(GPUPOOL_ERR_INVALID, err);
  }
  web_config *web = NULL;
  web_files files;
  if (c.web_config[0] && web_config_load(c.web_config, (int64_t)(clock_realtime_ns() / 1000000000u),
                                         &web, &files, err, sizeof err) != 0) {
    pthread_mutex_unlock(&g_lock);
    return agent_fail(GPUPOOL_ERR_INVALID, err);
  }
  g_cfg = c;
  gpupool_status s = start_locked(&g_cfg, web, &files);
  if (s == GPUPOOL_OK) {
    g_owner = getpid();
    if (!g_exit_handler)
      g_exit_handler = atexit(stop_at_exit) == 0;
  }
  pthread_mutex_unlock(&g_lock);
  return s;
}

void gpupool_agent_stop(void) {
  pthread_mutex_lock(&g_lock);
  /* In a forked child the threads to stop are the parent's: leave them. */
  if (g_running && g_owner == getpid()) {
    stop_locked(1);
    g_owner = 0;
  }
  pthread_mutex_unlock(&g_lock);
}

int gpupool_agent_port(void) {
  pthread_mutex_lock(&g_lock);
  /* A forked child inherits the parent's state but serves nothing. */
  int port = g_running && g_owner == getpid() ? http_port() : 0;
  pthread_mutex_unlock(&g_lock);
  return port;
}
