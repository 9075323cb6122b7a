#include "agent_conf.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/kvconf.h"
#include "oom_store.h"

int agent_parse_listen(const char *text, char *host, size_t hostlen, int *port, char *err,
                       size_t errlen) {
  const char *port_text = NULL;
  size_t hlen;
  const char *h = text;
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    if (!close) {
      snprintf(err, errlen, "listen: '%s': missing ']'", text);
      return -1;
    }
    h = text + 1;
    hlen = (size_t)(close - h);
    if (hlen == 0) {
      snprintf(err, errlen, "listen: '%s': empty IPv6 address", text);
      return -1;
    }
    if (close[1] == ':')
      port_text = close + 2;
    else if (close[1] != '\0') {
      snprintf(err, errlen, "listen: '%s': expected ':port' after ']'", text);
      return -1;
    }
  } else {
    const char *colon = strchr(text, ':');
    if (colon && strchr(colon + 1, ':')) {
      snprintf(err, errlen, "listen: '%s': write IPv6 addresses in brackets, as [::1]:9477", text);
      return -1;
    }
    hlen = colon ? (size_t)(colon - text) : strlen(text);
    if (colon)
      port_text = colon + 1;
  }
  if (hlen >= hostlen) {
    snprintf(err, errlen, "listen: '%s': host name too long", text);
    return -1;
  }
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  *port = -1;
  if (port_text) {
    uint64_t v;
    if (kvconf_u64(port_text, 0, 65535, &v) != 0) {
      snprintf(err, errlen, "listen: '%s': the port must be a number from 0 to 65535", text);
      return -1;
    }
    *port = (int)v;
  }
  return 0;
}

/* Settings as given (before defaults are filled in and LOCAL_RANK added). */
typedef struct raw_settings {
  char listen[300];
  int have_listen;
  uint64_t sample_ms;
  uint64_t trace_events; /* UINT64_MAX = not given */
  int trace_off;
  uint64_t trace_tick_us; /* UINT64_MAX = not given */
  gpupool_cupti_mode cupti;
  uint64_t oom_reports; /* UINT64_MAX = not given */
  uint64_t oom_dir_max; /* UINT64_MAX = not given */
  agent_config *cfg;    /* labels, trace_file, sd_dir, hostname and oom_dir go straight here */
} raw_settings;

static int copy_setting(const char *key, const char *value, char *dst, size_t dstlen, char *err,
                        size_t errlen) {
  size_t n = strlen(value);
  if (n >= dstlen) {
    snprintf(err, errlen, "%s: value too long (%zu bytes, at most %zu)", key, n, dstlen - 1);
    return -1;
  }
  memcpy(dst, value, n + 1);
  return 0;
}

/* Checked here, where the value is read, so that a bad one is refused with
 * the name of where it came from, as every other key's (resolve_listen
 * parses it again once every source is read). */
static int set_listen(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  raw_settings *r = ctx;
  char host[sizeof r->cfg->listen_host];
  int port;
  if (strcasecmp(v.s, "off") != 0 &&
      agent_parse_listen(v.s, host, sizeof host, &port, err, errlen) != 0)
    return -1;
  r->have_listen = 1;
  return copy_setting(o->key, v.s, r->listen, sizeof r->listen, err, errlen);
}

static int set_sample_ms(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  ((raw_settings *)ctx)->sample_ms = v.u;
  return 0;
}

static int set_trace_events(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  raw_settings *r = ctx;
  if (v.u != 0 && v.u < 16) {
    snprintf(err, errlen, "trace_events: %llu is out of range (%s)", (unsigned long long)v.u,
             o->range);
    return -1;
  }
  r->trace_events = v.u;
  r->trace_off = v.u == 0;
  return 0;
}

static int set_trace_tick(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  ((raw_settings *)ctx)->trace_tick_us = v.u;
  return 0;
}

static int set_cupti(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  ((raw_settings *)ctx)->cupti = (gpupool_cupti_mode)v.u;
  return 0;
}

static int set_labels(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  return labels_parse(v.s, &((raw_settings *)ctx)->cfg->labels, err, errlen);
}

static int set_trace_file(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  agent_config *c = ((raw_settings *)ctx)->cfg;
  return copy_setting(o->key, v.s, c->trace_file, sizeof c->trace_file, err, errlen);
}

static int set_sd_dir(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  agent_config *c = ((raw_settings *)ctx)->cfg;
  return copy_setting(o->key, v.s, c->sd_dir, sizeof c->sd_dir, err, errlen);
}

static int set_hostname(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  agent_config *c = ((raw_settings *)ctx)->cfg;
  return copy_setting(o->key, v.s, c->hostname, sizeof c->hostname, err, errlen);
}

static int set_oom_reports(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  ((raw_settings *)ctx)->oom_reports = v.u;
  return 0;
}

static int set_oom_dir_max(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  ((raw_settings *)ctx)->oom_dir_max = v.u;
  return 0;
}

static int set_oom_dir(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  agent_config *c = ((raw_settings *)ctx)->cfg;
  return copy_setting(o->key, v.s, c->oom_dir, sizeof c->oom_dir, err, errlen);
}

static int set_web_config(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  agent_config *c = ((raw_settings *)ctx)->cfg;
  return copy_setting(o->key, v.s, c->web_config, sizeof c->web_config, err, errlen);
}

static int set_healthz_open(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  ((raw_settings *)ctx)->cfg->healthz_open = (int)v.u;
  return 0;
}

static int set_allowed_hosts(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  return host_guard_parse(v.s, &((raw_settings *)ctx)->cfg->allowed_hosts, err, errlen);
}

static int set_size_buckets(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  ((raw_settings *)ctx)->cfg->size_buckets_classic = (int)v.u;
  return 0;
}

static int set_gzip_threads(void *ctx, const kvopt *o, kvopt_value v, char *err, size_t errlen) {
  ((raw_settings *)ctx)->cfg->gzip_threads = (unsigned)v.u;
  return 0;
}

unsigned agent_default_gzip_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    n = CPU_COUNT(&set); /* a process pinned to some CPUs (taskset, cgroup cpusets) */
  return n < 1 ? 1 : n > 4 ? 4 : (unsigned)n;
}

static const kvopt_choice size_bucket_sets[] = {{"coarse", 0}, {"classic", 1}, {NULL, 0}};

static const kvopt_choice cupti_modes[] = {{"auto", GPUPOOL_CUPTI_AUTO},
                                           {"off", GPUPOOL_CUPTI_OFF},
                                           {"force", GPUPOOL_CUPTI_FORCE},
                                           {NULL, 0}};

/* The keys of GPUPOOL_AGENT_CONF (docs/metrics.md, "Configuration"). */
static const kvopt agent_options[] = {
    {"listen", KVOPT_STRING, .set = set_listen},
    {"sample_interval_ms", KVOPT_U64, 1, 86400000, .set = set_sample_ms},
    {"trace_events", KVOPT_U64, 0, AGENT_MAX_TRACE_EVENTS, .range = "0 (off) or 16 to 16777216",
     .set = set_trace_events},
    {"trace_tick_us", KVOPT_U64, 0, AGENT_MAX_TRACE_TICK_US, .range = "0 (exact stamps) to 100000",
     .set = set_trace_tick},
    {"cupti", KVOPT_CHOICE, .choices = cupti_modes, .nocase = 1, .set = set_cupti},
    {"labels", KVOPT_STRING, .set = set_labels},
    {"trace_file", KVOPT_STRING, .set = set_trace_file},
    {"sd_dir", KVOPT_STRING, .set = set_sd_dir},
    {"hostname", KVOPT_STRING, .set = set_hostname},
    {"oom_reports", KVOPT_U64, 0, OOM_STORE_MAX_KEEP, .set = set_oom_reports},
    {"oom_dir", KVOPT_STRING, .set = set_oom_dir},
    {"oom_dir_max", KVOPT_U64, 0, 1000000, .range = "0 (no bound) to 1000000",
     .set = set_oom_dir_max},
    {"web_config", KVOPT_STRING, .set = set_web_config},
    {"healthz_open", KVOPT_U64, 0, 1, .range = "0 or 1", .set = set_healthz_open},
    {"allowed_hosts", KVOPT_STRING, .set = set_allowed_hosts},
    {"size_buckets", KVOPT_CHOICE, .choices = size_bucket_sets, .nocase = 1,
     .set = set_size_buckets},
    {"gzip_threads", KVOPT_U64, 1, AGENT_MAX_GZIP_THREADS, .set = set_gzip_threads},
};
#define N_AGENT_OPTIONS (sizeof agent_options / sizeof agent_options[0])

static int apply_pair(raw_settings *r, const char *key, const char *value, char *err,
                      size_t errlen) {
  return kvopt_apply(agent_options, N_AGENT_OPTIONS, r, key, value, err, errlen);
}

/* The fields of the options struct, as if they were pairs of the string. */
static int apply_options(const gpupool_agent_options *o, raw_settings *r, char *err,
                         size_t errlen) {
  /* "" is the default, as for the other strings of the struct (it used to
   * read as ":9477": every interface) */
  if (o->listen && o->listen[0] && apply_pair(r, "listen", o->listen, err, errlen) != 0)
    return -1;
  if (o->sample_interval_ms) {
    if (o->sample_interval_ms > 86400000) {
      snprintf(err, errlen, "sample_interval_ms: %u is more than 86400000", o->sample_interval_ms);
      return -1;
    }
    r->sample_ms = o->sample_interval_ms;
  }
  if (o->trace_events) {
    if (o->trace_events < 16 || o->trace_events > AGENT_MAX_TRACE_EVENTS) {
      snprintf(err, errlen, "trace_events: %zu is not a number from 16 to %u", o->trace_events,
               AGENT_MAX_TRACE_EVENTS);
      return -1;
    }
    r->trace_events = o->trace_events;
  }
  if (o->trace_off)
    r->trace_off = 1;
  if (o->trace_tick_us) {
    if (o->trace_tick_us > AGENT_MAX_TRACE_TICK_US) {
      snprintf(err, errlen, "trace_tick_us: %u is more than %u", o->trace_tick_us,
               AGENT_MAX_TRACE_TICK_US);
      return -1;
    }
    r->trace_tick_us = o->trace_tick_us;
  }
  if (o->trace_tick_off)
    r->trace_tick_us = 0;
  if (o->cupti < GPUPOOL_CUPTI_AUTO || o->cupti > GPUPOOL_CUPTI_FORCE) {
    snprintf(err, errlen, "cupti: %d is not a gpupool_cupti_mode", (int)o->cupti);
    return -1;
  }
  r->cupti = o->cupti;
  if (o->labels && apply_pair(r, "labels", o->labels, err, errlen) != 0)
    return -1;
  if (o->trace_file && apply_pair(r, "trace_file", o->trace_file, err, errlen) != 0)
    return -1;
  if (o->sd_dir && apply_pair(r, "sd_dir", o->sd_dir, err, errlen) != 0)
    return -1;
  if (o->hostname && apply_pair(r, "hostname", o->hostname, err, errlen) != 0)
    return -1;
  if (o->web_config && apply_pair(r, "web_config", o->web_config, err, errlen) != 0)
    return -1;
  if (o->healthz_open)
    r->cfg->healthz_open = 1;
  if (o->allowed_hosts && apply_pair(r, "allowed_hosts", o->allowed_hosts, err, errlen) != 0)
    return -1;
  return 0;
}

static int resolve_listen(const raw_settings *r, int use_env, agent_config *c, char *err,
                          size_t errlen) {
  if (r->have_listen && strcasecmp(r->listen, "off") == 0) {
    c->listen_off = 1;
    return 0;
  }
  int port = AGENT_DEFAULT_PORT;
  strcpy(c->listen_host, AGENT_DEFAULT_HOST);
  if (r->have_listen) {
    if (agent_parse_listen(r->listen, c->listen_host, sizeof c->listen_host, &port, err, errlen) !=
        0)
      return -1;
    if (port < 0)
      port = AGENT_DEFAULT_PORT;
  }
  /* Ranks of one node listen on consecutive ports (not for an ephemeral one). */
  const char *rank = use_env ? getenv("LOCAL_RANK") : NULL;
  if (rank && *rank && port != 0) {
    uint64_t v;
    if (kvconf_u64(rank, 0, 65535, &v) != 0 || port + (int)v > 65535) {
      snprintf(err, errlen, "LOCAL_RANK='%s' is not a rank that fits the port %d", rank, port);
      return -1;
    }
    port += (int)v;
  }
  c->listen_port = port;
  return 0;
}

/* path (size bytes) made absolute against the working directory now. The
 * agent uses its paths long after the start (trace_file at stop, oom_dir at
 * each OOM, sd_dir's file at stop, web_config at each reload), and the
 * program may chdir() in between: a relative path would then name another
 * file, or none. "" stays "". 0, or -1 with a reason. */
static int make_absolute(const char *key, char *path, size_t size, char *err, size_t errlen) {
  if (!path[0] || path[0] == '/')
    return 0;
  char cwd[PATH_MAX], full[2 * PATH_MAX];
  if (!getcwd(cwd, sizeof cwd)) {
    snprintf(err, errlen, "%s '%.200s': relative, and the working directory is unknown: %s", key,
             path, strerror(errno));
    return -1;
  }
  size_t n = (size_t)snprintf(full, sizeof full, "%s%s%s", cwd, cwd[1] ? "/" : "", path);
  if (n >= size) {
    snprintf(err, errlen, "%s '%.200s': path too long once made absolute (%zu bytes, at most %zu)",
             key, path, n, size - 1);
    return -1;
  }
  memcpy(path, full, n + 1);
  return 0;
}

/* o's fields, then conf (the text of GPUPOOL_AGENT_CONF; NULL: none), then
 * LOCAL_RANK when use_env. */
static int resolve(const gpupool_agent_options *o, const char *conf, int use_env, agent_config *out,
                   char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  raw_settings r = {.trace_events = UINT64_MAX,
                    .trace_tick_us = UINT64_MAX,
                    .oom_reports = UINT64_MAX,
                    .oom_dir_max = UINT64_MAX,
                    .cfg = out};

  if (apply_options(o, &r, err, errlen) != 0)
    return -1;
  char why[512];
  if (kvopt_parse(conf, agent_options, N_AGENT_OPTIONS, &r, why, sizeof why) != 0) {
    snprintf(err, errlen, "GPUPOOL_AGENT_CONF: %s", why);
    return -1;
  }

  if (resolve_listen(&r, use_env, out, err, errlen) != 0)
    return -1;
  if (make_absolute("trace_file", out->trace_file, sizeof out->trace_file, err, errlen) != 0 ||
      make_absolute("sd_dir", out->sd_dir, sizeof out->sd_dir, err, errlen) != 0 ||
      make_absolute("oom_dir", out->oom_dir, sizeof out->oom_dir, err, errlen) != 0 ||
      make_absolute("web_config", out->web_config, sizeof out->web_config, err, errlen) != 0)
    return -1;
  out->sample_interval_ms = r.sample_ms ? (unsigned)r.sample_ms : AGENT_DEFAULT_SAMPLE_MS;
  if (r.trace_off)
    out->trace_events = 0;
  else
    out->trace_events = r.trace_events != UINT64_MAX ? r.trace_events : AGENT_DEFAULT_TRACE_EVENTS;
  out->trace_tick_us =
      r.trace_tick_us != UINT64_MAX ? (unsigned)r.trace_tick_us : AGENT_DEFAULT_TRACE_TICK_US;
  out->cupti = r.cupti;
  out->oom_reports = r.oom_reports != UINT64_MAX ? (size_t)r.oom_reports : OOM_STORE_DEFAULT_KEEP;
  out->oom_dir_max =
      r.oom_dir_max != UINT64_MAX ? (size_t)r.oom_dir_max : OOM_STORE_DEFAULT_DIR_MAX;
  if (!out->gzip_threads)
    out->gzip_threads = agent_default_gzip_threads();
  if (!out->hostname[0] && gethostname(out->hostname, sizeof out->hostname) != 0)
    strcpy(out->hostname, "localhost");
  out->hostname[sizeof out->hostname - 1] = '\0';
  if (!utf8_valid(out->hostname)) {
    snprintf(err, errlen, "hostname: '%s' is not UTF-8", out->hostname);
    return -1;
  }
  if (out->listen_off && (out->sd_dir[0] || out->web_config[0])) {
    snprintf(err, errlen, "%s needs the HTTP server (listen is off)",
             out->sd_dir[0] ? "sd_dir" : "web_config");
    return -1;
  }
  return 0;
}

int agent_config_resolve(const gpupool_agent_options *opt, agent_config *out, char *err,
                         size_t errlen) {
  static const gpupool_agent_options none;
  const gpupool_agent_options *o = opt ? opt : &none;
  const char *conf = o->ignore_env ? NULL : getenv("GPUPOOL_AGENT_CONF");
  return resolve(o, conf, !o->ignore_env, out, err, errlen);
}

int agent_config_resolve_conf(const char *conf, agent_config *out, char *err, size_t errlen) {
  static const gpupool_agent_options none;
  return resolve(&none, conf, 1, out, err, errlen);
}
