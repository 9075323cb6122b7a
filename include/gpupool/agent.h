/* gpupool agent: serves every pool of the process as Prometheus metrics
 * (/metrics), a Chrome trace (/trace), a block snapshot (/snapshot), /healthz
 * and an index page (/), from an embedded HTTP server.
 *
 * The agent never stops the host program. A failure to start (port in use,
 * bad configuration) is a status with the reason in gpupool_last_error()
 * (the library prints nothing of it); one while it runs (no GPU, no CUPTI,
 * a configuration reload that fails) is a line on stderr and a metric. */
#ifndef GPUPOOL_AGENT_H
#define GPUPOOL_AGENT_H

#include <stdio.h>

#include "gpupool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  GPUPOOL_CUPTI_AUTO = 0, /* subscribe when a driver, a GPU and CUPTI are present */
  GPUPOOL_CUPTI_OFF,
  GPUPOOL_CUPTI_FORCE, /* a failure to subscribe makes gpupool_agent_start fail */
} gpupool_cupti_mode;

/* Zero-initialise; every zero field means "default". GPUPOOL_AGENT_CONF
 * ("key:value,key:value", keys as below) is applied after these fields unless
 * ignore_env is set. */
typedef struct gpupool_agent_options {
  const char *listen;          /* "host:port", "[v6]:port" or ":port"; NULL or "":
                                  127.0.0.1:9477 plus LOCAL_RANK; port 0 = ephemeral;
                                  "off" = no HTTP server */
  unsigned sample_interval_ms; /* counter samples and device memory reads; default 1000 */
  size_t trace_events;         /* event ring capacity per pool stream; default 65536 */
  int trace_off;               /* nonzero: record no allocation events */
  gpupool_cupti_mode cupti;
  const char *labels;     /* constant labels "name=value;name=value" */
  const char *trace_file; /* write the trace there at gpupool_agent_stop / exit, gzip'd
                             where the name ends in ".gz"; a directory that is missing
                             or not writable fails the start.
                             This and the other paths (sd_dir, web_config, and
                             GPUPOOL_AGENT_CONF's oom_dir): a relative one is resolved at
                             gpupool_agent_start, whatever chdir() the program makes
                             later */
  const char *sd_dir;     /* write a Prometheus file_sd target file there */
  int ignore_env;         /* nonzero: do not read GPUPOOL_AGENT_CONF (nor LOCAL_RANK) */
  const char *hostname;   /* the `hostname` label; default gethostname() */
  unsigned trace_tick_us; /* event timestamps: a shared stamp every this many us while events
                             are frequent (1,000,000/s or more), else exact; default 1000, at
                             most 100000 */
  int trace_tick_off;     /* nonzero: every event stamped exactly (as trace_tick_us:0) */
  const char *web_config; /* TLS and basic auth: a web configuration file in the format of
                             Prometheus exporter-toolkit (node_exporter's --web.config.file);
                             re-read when it changes. See docs/security.md */
  int healthz_open;       /* nonzero: /healthz answers without basic auth */
  /* Listening on loopback, the agent answers only Host headers that name this
   * machine: localhost, an IP address, its host name (against DNS rebinding).
   * More names here, ';'-separated (".example.com": every name under it), or
   * "*" for any Host. See docs/security.md */
  const char *allowed_hosts;
} gpupool_agent_options;

gpupool_status gpupool_agent_start(const gpupool_agent_options *opt);
/* Checks conf as gpupool_agent_start(NULL) would read it from
 * GPUPOOL_AGENT_CONF (LOCAL_RANK added to its port included), without
 * starting anything: GPUPOOL_OK, or GPUPOOL_ERR_INVALID with the reason the
 * start would give in gpupool_last_error() ("gpupool agent: ...",
 * naming the key: "gpupool agent: GPUPOOL_AGENT_CONF: cupti: ...", or the
 * settings together: "gpupool agent: sd_dir needs the HTTP server ...").
 * NULL or "" is valid. What only the start tells
 * is left to it: whether the port is free, the directories (trace_file's,
 * oom_dir) writable, web_config's file readable. */
gpupool_status gpupool_agent_conf_check(const char *conf);
/* Stops the agent (idempotent; an exit handler calls it). It joins the
 * agent's threads: not async-signal-safe, so not from a signal handler (set
 * a flag there and stop from an ordinary thread, docs/metrics.md). */
void gpupool_agent_stop(void);
/* The TCP port the agent listens on, or 0 when it is not serving. */
int gpupool_agent_port(void);

/* Write the Chrome trace of everything recorded so far to f (no HTTP
 * needed), and flush f. GPUPOOL_ERR_INVALID when f is NULL;
 * GPUPOOL_ERR_BACKEND when a write or the flush fails (a full disk, say),
 * with the system's reason in gpupool_last_error() ("gpupool_trace_write:
 * write failed: No space left on device"): part of the document may be in
 * the file; GPUPOOL_ERR_HOST_OOM when memory runs out (the document is cut). */
gpupool_status gpupool_trace_write(FILE *f);
/* Event records pool's rings have written and overwritten so far, summed
 * over its streams: the figures of gpupool_trace_events_total and
 * gpupool_trace_events_dropped_total (a record is one event, or an
 * allocation and its free in one tick of the event clock: docs/trace.md).
 * GPUPOOL_ERR_INVALID when an argument is NULL. */
gpupool_status gpupool_trace_event_counts(gpupool *pool, uint64_t *recorded, uint64_t *dropped);

/* Write PyTorch's memory snapshot of the live pools (every pool when pool is
 * NULL, else the pools whose `pool` metrics label it is: the name, or
 * "name#2", "name#3", ... for the later pools of a name on one device) to f
 * as a pickle that torch.cuda._memory_viz and the memory_viz page read:
 * segments and blocks now, and device_traces from the event rings (empty
 * while the agent does not record events), and flush f. No agent needed.
 * GPUPOOL_ERR_INVALID when f is NULL or no pool has that label (nothing
 * written); GPUPOOL_ERR_BACKEND when a write or the flush fails, with the
 * system's reason in gpupool_last_error(), as gpupool_trace_write. See
 * docs/oom.md. */
gpupool_status gpupool_snapshot_write_torch(FILE *f, const char *pool);

/* Hand CUPTI over to another tool (PyTorch's profiler, Nsight) mid-run:
 * deliver what CUPTI holds, disable memory activity, unsubscribe and
 * cuptiFinalize. Call it where no other thread is inside a CUDA call (for
 * example after torch.cuda.synchronize()). The agent keeps serving pool
 * metrics, with gpupool_cupti_up 0 and reason "released". GPUPOOL_OK also
 * when CUPTI was not recording. */
gpupool_status gpupool_agent_cupti_release(void);
/* Take CUPTI back after the other tool stopped (its profiler session ended):
 * subscribes again. GPUPOOL_OK when recording; otherwise an error with the
 * reason in gpupool_last_error() (e.g. the other tool still holds CUPTI).
 * Allocations made while released are not seen: their later frees count as
 * unknown releases. */
gpupool_status gpupool_agent_cupti_acquire(void);

#ifdef __cplusplus
}
#endif
#endif
