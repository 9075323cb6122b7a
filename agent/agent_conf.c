#include "agent_conf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "oom_store.h"
#include "pool/kvconf.h"

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

static int apply_pair(void *ctx, const char *key, const char *value, char *err, size_t errlen) {
  raw_settings *r = ctx;
  if (strcmp(key, "listen") == 0) {
    r->have_listen = 1;
    return copy_setting(key, value, r->listen, sizeof r->listen, err, errlen);
  }
  if (strcmp(key, "sample_interval_ms") == 0) {
    if (kvconf_u64(value, 1, 86400000, &r->sample_ms) != 0) {
      snprintf(err, errlen, "sample_interval_ms: '%s' is not a number from 1 to 86400000", value);
      return -1;
    }
    return 0;
  }
  if (strcmp(key, "trace_events") == 0) {
    uint64_t v;
    if (kvconf_u64(value, 0, AGENT_MAX_TRACE_EVENTS, &v) != 0 || (v != 0 && v < 16)) {
      snprintf(err, errlen, "trace_events: '%s' is not 0 (off) or a number from 16 to %u", value,
               AGENT_MAX_TRACE_EVENTS);
      return -1;
    }
    r->trace_events = v;
    r->trace_off = v == 0;
    return 0;
  }
  if (strcmp(key, "trace_tick_us") == 0) {
    if (kvconf_u64(value, 0, AGENT_MAX_TRACE_TICK_US, &r->trace_tick_us) != 0) {
      snprintf(err, errlen, "trace_tick_us: '%s' is not a number from 0 (exact stamps) to %u",
               value, AGENT_MAX_TRACE_TICK_US);
      return -1;
    }
    return 0;
  }
  if (strcmp(key, "cupti") == 0) {
    if (strcasecmp(value, "auto") == 0)
      r->cupti = GPUPOOL_CUPTI_AUTO;
    else if (strcasecmp(value, "off") == 0)
      r->cupti = GPUPOOL_CUPTI_OFF;
    else if (strcasecmp(value, "force") == 0)
      r->cupti = GPUPOOL_CUPTI_FORCE;
    else {
      snprintf(err, errlen, "cupti: '%s' is not auto, off or force", value);
      return -1;
    }
    return 0;
  }
  if (strcmp(key, "labels") == 0)
    return labels_parse(value, &r->cfg->labels, err, errlen);
  if (strcmp(key, "trace_file") == 0)
    return copy_setting(key, value, r->cfg->trace_file, sizeof r->cfg->trace_file, err, errlen);
  if (strcmp(key, "sd_dir") == 0)
    return copy_setting(key, value, r->cfg->sd_dir, sizeof r->cfg->sd_dir, err, errlen);
  if (strcmp(key, "hostname") == 0)
    return copy_setting(key, value, r->cfg->hostname, sizeof r->cfg->hostname, err, errlen);
  if (strcmp(key, "oom_reports") == 0) {
    if (kvconf_u64(value, 0, OOM_STORE_MAX_KEEP, &r->oom_reports) != 0) {
      snprintf(err, errlen, "oom_reports: '%s' is not a number from 0 to %d", value,
               OOM_STORE_MAX_KEEP);
      return -1;
    }
    return 0;
  }
  if (strcmp(key, "oom_dir") == 0)
    return copy_setting(key, value, r->cfg->oom_dir, sizeof r->cfg->oom_dir, err, errlen);
  if (strcmp(key, "size_buckets") == 0) {
    if (strcasecmp(value, "coarse") != 0 && strcasecmp(value, "classic") != 0) {
      snprintf(err, errlen, "size_buckets: '%s' is not coarse or classic", value);
      return -1;
    }
    r->cfg->size_buckets_classic = strcasecmp(value, "classic") == 0;
    return 0;
  }
  snprintf(err, errlen,
           "unknown key '%s' (known: listen, sample_interval_ms, trace_events, trace_tick_us, "
           "cupti, labels, trace_file, sd_dir, hostname, oom_reports, oom_dir, size_buckets)",
           key);
  return -1;
}

/* The fields of the options struct, as if they were pairs of the string. */
static int apply_options(const gpupool_agent_options *o, raw_settings *r, char *err,
                         size_t errlen) {
  if (o->listen && apply_pair(r, "listen", o->listen, err, errlen) != 0)
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

int agent_config_resolve(const gpupool_agent_options *opt, agent_config *out, char *err,
                         size_t errlen) {
  static const gpupool_agent_options none;
  const gpupool_agent_options *o = opt ? opt : &none;
  memset(out, 0, sizeof *out);
  raw_settings r = {.trace_events = UINT64_MAX,
                    .trace_tick_us = UINT64_MAX,
                    .oom_reports = UINT64_MAX,
                    .cfg = out};

  if (apply_options(o, &r, err, errlen) != 0)
    return -1;
  if (!o->ignore_env) {
    const char *env = getenv("GPUPOOL_AGENT_CONF");
    char why[512];
    if (kvconf_parse(env, apply_pair, &r, why, sizeof why) != 0) {
      snprintf(err, errlen, "GPUPOOL_AGENT_CONF: %s", why);
      return -1;
    }
  }

  if (resolve_listen(&r, !o->ignore_env, out, err, errlen) != 0)
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
  if (!out->hostname[0] && gethostname(out->hostname, sizeof out->hostname) != 0)
    strcpy(out->hostname, "localhost");
  out->hostname[sizeof out->hostname - 1] = '\0';
  if (!utf8_valid(out->hostname)) {
    snprintf(err, errlen, "hostname: '%s' is not UTF-8", out->hostname);
    return -1;
  }
  return 0;
}
