#include "metrics.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "advice.h"
#include "agent_health.h"
#include "http_accept.h"
#include "http_gzip.h"
#include "http_gzip_parallel.h"
#include "exporters/metrics_advice.h"
#include "metrics_agent.h"
#include "metrics_cupti.h"
#include "exporters/metrics_devices.h"
#include "exporters/metrics_pools.h"
#include "metrics_collect.h"
#include "core/clock.h"

/* Labels of every series, set at agent start and read by each scrape. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_hostname[LABEL_VALUE_MAX];
static char g_const_labels[LABELS_MAX * (LABEL_NAME_MAX + 2 * LABEL_VALUE_MAX + 4)];
/* The size of the last exposition, to size the next buffer in one go. */
static size_t g_last_size = 64 * 1024;

void metrics_configure(const char *hostname, const agent_labels *labels) {
  prom_buf b;
  prom_buf_init(&b, 256);
  prom_label l[LABELS_MAX];
  size_t n = labels ? labels->n : 0;
  for (size_t i = 0; i < n; i++) {
    l[i].name = labels->name[i];
    l[i].value = labels->value[i];
  }
  prom_render_labels(&b, l, n);
  pthread_mutex_lock(&g_lock);
  snprintf(g_hostname, sizeof g_hostname, "%s", hostname ? hostname : "");
  snprintf(g_const_labels, sizeof g_const_labels, "%.*s", b.failed ? 0 : (int)b.len,
           b.data ? b.data : "");
  pthread_mutex_unlock(&g_lock);
  prom_buf_free(&b);
}

/* Under g_lock. */
static void default_hostname(void) {
  if (!g_hostname[0] && gethostname(g_hostname, sizeof g_hostname - 1) != 0)
    strcpy(g_hostname, "localhost");
}

void metrics_hostname(char *out, size_t len) {
  pthread_mutex_lock(&g_lock);
  default_hostname();
  snprintf(out, len, "%s", g_hostname);
  pthread_mutex_unlock(&g_lock);
}

/* What consecutive scrapes reuse, so that one in the steady state allocates
 * only the response it hands over: the snapshot's arrays, the text of a
 * gzip'd response, the compressor (its threads and zlib streams, each
 * deflateReset, not deflateInit2 and deflateEnd per scrape) and its output
 * (about 0.7 MB with 32 pools and one thread, 0.26 MB more per compression
 * thread, kept while the agent runs). Freeing and allocating buffers of
 * 100-300 KB per scrape made glibc trim and grow its heap each time: a page
 * fault per 4 KB touched, a quarter of a scrape. One scrape at a time uses
 * it, the parallel compressor included; a concurrent one allocates its own
 * buffers and compresses on its own thread (http_gzip). */
static struct {
  pthread_mutex_t lock;
  metrics_snapshot snap;
  prom_buf text;
  unsigned gzip_threads; /* the compressor's, when it is made */
  http_gzip_par *gzipper;
  uint8_t *gz;
  size_t gz_cap;
} g_scratch = {.lock = PTHREAD_MUTEX_INITIALIZER, .gzip_threads = 1};

static int render_snapshot(metrics_snapshot *s, prom_buf *buf, prom_format format) {
  char hostname[LABEL_VALUE_MAX];
  char const_labels[sizeof g_const_labels];
  pthread_mutex_lock(&g_lock);
  default_hostname();
  memcpy(hostname, g_hostname, sizeof hostname);
  memcpy(const_labels, g_const_labels, sizeof const_labels);
  pthread_mutex_unlock(&g_lock);

  int rc = metrics_snapshot_take(s, hostname, const_labels);
  if (rc == 0) {
    agent_health h;
    agent_health_get(&h);
    prom_writer w;
    prom_writer_init(&w, buf, format);
    metrics_write_agent(&w, s);
    metrics_write_devices(&w, s);
    metrics_write_pools(&w, s);
    metrics_write_cupti(&w, s, h.start_s);
    advice_summary adv;
    advice_summary_get(&adv);
    metrics_write_advice(&w, s, &adv, (double)clock_realtime_ns() / 1e9);
    advice_summary_free(&adv);
    prom_finish(&w);
    rc = buf->failed ? -1 : 0;
  }
  return rc;
}

int metrics_render(prom_buf *buf, prom_format format) {
  if (pthread_mutex_trylock(&g_scratch.lock) == 0) {
    int rc = render_snapshot(&g_scratch.snap, buf, format);
    pthread_mutex_unlock(&g_scratch.lock);
    return rc;
  }
  metrics_snapshot *s = calloc(1, sizeof *s);
  if (!s)
    return -1;
  int rc = render_snapshot(s, buf, format);
  metrics_snapshot_free(s);
  free(s);
  return rc;
}

void metrics_gzip_threads(unsigned threads) {
  pthread_mutex_lock(&g_scratch.lock);
  if (threads != g_scratch.gzip_threads) {
    http_gzip_par_free(g_scratch.gzipper); /* the next gzip'd scrape makes one anew */
    g_scratch.gzipper = NULL;
    g_scratch.gzip_threads = threads;
  }
  pthread_mutex_unlock(&g_scratch.lock);
}

void metrics_release(void) {
  /* trylock: in a child forked while a scrape held it, nobody will unlock */
  if (pthread_mutex_trylock(&g_scratch.lock) != 0)
    return;
  metrics_snapshot_free(&g_scratch.snap);
  prom_buf_free(&g_scratch.text);
  http_gzip_par_free(g_scratch.gzipper); /* joins its threads */
  free(g_scratch.gz);
  g_scratch.gzipper = NULL;
  g_scratch.gz = NULL;
  g_scratch.gz_cap = 0;
  pthread_mutex_unlock(&g_scratch.lock);
}

/* The gzip'd exposition, rendered and compressed in g_scratch: 0 with
 * *body (malloc'd, the compressed size) or -1 when the scratch is busy or
 * memory ran out (nothing allocated). */
static int render_gzip(prom_format format, char **body, size_t *len) {
  if (pthread_mutex_trylock(&g_scratch.lock) != 0)
    return -1;
  prom_buf *text = &g_scratch.text;
  text->len = 0;
  text->failed = 0;
  int rc = render_snapshot(&g_scratch.snap, text, format);
  if (rc == 0 && !g_scratch.gzipper)
    g_scratch.gzipper = http_gzip_par_new(g_scratch.gzip_threads);
  size_t need = g_scratch.gzipper ? http_gzip_par_bound(g_scratch.gzipper, text->len) : 0;
  if (rc == 0 && need && g_scratch.gz_cap < need) {
    uint8_t *gz = realloc(g_scratch.gz, need);
    if (gz) {
      g_scratch.gz = gz;
      g_scratch.gz_cap = need;
    }
  }
  size_t n = 0;
  if (rc == 0 && need && g_scratch.gz_cap >= need)
    n = http_gzip_par_run(g_scratch.gzipper, text->data, text->len, g_scratch.gz, g_scratch.gz_cap);
  *body = n ? malloc(n) : NULL;
  if (*body) {
    memcpy(*body, g_scratch.gz, n);
    *len = n;
  }
  pthread_mutex_unlock(&g_scratch.lock);
  return *body ? 0 : -1;
}

/* OpenMetrics only when the client names it, in a version we write (1.0.0,
 * 0.0.1 or none, as client_golang serves it), at a quality no lower than the
 * text format's; *content_type: what to answer it with. */
static prom_format choose_format(const char *accept, const char **content_type) {
  static const char *const om_versions[] = {"1.0.0", "0.0.1", NULL};
  *content_type = PROM_CONTENT_TYPE_TEXT;
  if (!accept || !strcasestr(accept, "application/openmetrics-text"))
    return PROM_FORMAT_TEXT;
  char version[16];
  double om = http_accept_q_version(accept, "application/openmetrics-text", om_versions, version,
                                    sizeof version);
  double text = http_accept_q(accept, "text/plain", 0);
  if (!(om > 0 && om >= text))
    return PROM_FORMAT_TEXT;
  /* The same text either way; a client that asked for 0.0.1 only is told 0.0.1. */
  *content_type = strcmp(version, "0.0.1") ? PROM_CONTENT_TYPE_OPENMETRICS
                                           : PROM_CONTENT_TYPE_OPENMETRICS_0_0_1;
  return PROM_FORMAT_OPENMETRICS;
}

void metrics_endpoint(const endpoint_args *args, endpoint_body *out) {
  if (endpoint_no_params(args, "/metrics", out) != 0)
    return;
  uint64_t t0 = clock_monotonic_ns();
  prom_format format = choose_format(args->accept, &out->content_type);
  if (http_accepts_gzip(args->accept_encoding) && http_gzip_available() &&
      render_gzip(format, &out->data, &out->len) == 0) {
    out->status = 200;
    out->content_encoding = "gzip";
    agent_health_scrape(clock_monotonic_ns() - t0);
    return;
  }

  /* Uncompressed, or the scratch was busy: render into the response. */
  pthread_mutex_lock(&g_lock);
  size_t hint = g_last_size + g_last_size / 4;
  pthread_mutex_unlock(&g_lock);
  prom_buf buf;
  prom_buf_init(&buf, hint);
  size_t len = 0;
  char *body = metrics_render(&buf, format) == 0 ? prom_buf_take(&buf, &len) : NULL;
  prom_buf_free(&buf);
  if (!body) {
    endpoint_out_of_memory(out, "rendering /metrics");
    return;
  }
  pthread_mutex_lock(&g_lock);
  g_last_size = len;
  pthread_mutex_unlock(&g_lock);

  out->status = 200;
  out->data = body;
  out->len = len;
  char *zipped;
  size_t zlen;
  if (http_accepts_gzip(args->accept_encoding) && http_gzip(body, len, &zipped, &zlen) == 0) {
    free(body);
    out->data = zipped;
    out->len = zlen;
    out->content_encoding = "gzip";
  }
  agent_health_scrape(clock_monotonic_ns() - t0);
}
