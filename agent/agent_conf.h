/* The agent's resolved configuration: defaults, then the fields of
 * gpupool_agent_options, then GPUPOOL_AGENT_CONF (unless ignore_env), then
 * LOCAL_RANK added to the port. Everything is validated here, before the
 * agent starts anything. Relative paths (trace_file, sd_dir, oom_dir,
 * web_config) are made absolute here, against the working directory of the
 * start: the agent uses them later, when the program may have chdir()'d. */
#ifndef GPUPOOL_AGENT_CONF_H
#define GPUPOOL_AGENT_CONF_H

#include <limits.h>
#include <stddef.h>

#include "gpupool/agent.h"
#include "host_guard.h"
#include "labels.h"

#define AGENT_DEFAULT_HOST          "127.0.0.1"
#define AGENT_DEFAULT_PORT          9477
#define AGENT_DEFAULT_SAMPLE_MS     1000
#define AGENT_DEFAULT_TRACE_EVENTS  65536
#define AGENT_MAX_TRACE_EVENTS      (1u << 24) /* 16777216, as agent_conf.c states it */
#define AGENT_DEFAULT_TRACE_TICK_US 1000
#define AGENT_MAX_TRACE_TICK_US     100000u
#define AGENT_MAX_GZIP_THREADS      64 /* HTTP_GZIP_MAX_THREADS */

typedef struct agent_config {
  int listen_off;        /* listen:off: no HTTP server */
  char listen_host[256]; /* "" = every interface (IPv6 and IPv4) */
  int listen_port;       /* with LOCAL_RANK added; 0 = ephemeral */
  unsigned sample_interval_ms;
  size_t trace_events;    /* 0 = events off */
  unsigned trace_tick_us; /* event clock tick (pool/event_clock.h); 0 = every stamp exact */
  gpupool_cupti_mode cupti;
  agent_labels labels;
  char trace_file[PATH_MAX]; /* "" = none */
  char sd_dir[PATH_MAX];     /* "" = none */
  char hostname[LABEL_VALUE_MAX];
  size_t oom_reports;        /* OOM reports kept (agent/oom_store.h) */
  char oom_dir[PATH_MAX];    /* "" = none: where each OOM report is written */
  size_t oom_dir_max;        /* this agent's reports oom_dir holds at most (0: no bound) */
  char web_config[PATH_MAX]; /* "" = none: plain HTTP, no auth */
  int healthz_open;          /* /healthz without basic auth */
  host_guard allowed_hosts;  /* Host names a loopback listener answers besides its own */
  int size_buckets_classic;  /* size_buckets:classic: all 41 power-of-two buckets */
  unsigned gzip_threads;     /* threads that compress one gzip'd /metrics (1 = serial) */
} agent_config;

/* 0 on success; -1 with a one-line reason. opt may be NULL. */
int agent_config_resolve(const gpupool_agent_options *opt, agent_config *out, char *err,
                         size_t errlen);

/* agent_config_resolve(NULL, ...) with conf read in place of the
 * environment's GPUPOOL_AGENT_CONF (NULL: none); LOCAL_RANK is still read. */
int agent_config_resolve_conf(const char *conf, agent_config *out, char *err, size_t errlen);

/* gzip_threads' default: 4, or fewer when the process may run on fewer CPUs. */
unsigned agent_default_gzip_threads(void);

/* Splits a listen address ("host:port", "[v6]:port", ":port", "host") into
 * host (without brackets; "" = every interface) and port (-1 when absent).
 * 0 or -1 with a reason. */
int agent_parse_listen(const char *text, char *host, size_t hostlen, int *port, char *err,
                       size_t errlen);

#endif
