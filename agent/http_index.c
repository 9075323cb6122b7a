#include "http_index.h"

#include <stdio.h>
#include <string.h>

#include "exporters/prom_buf.h"
#include "labels.h"
#include "pool_label.h"
#include "pool/registry.h"

#ifdef GPUPOOL_VERSION_STRING
#define INDEX_VERSION GPUPOOL_VERSION_STRING
#else
#define INDEX_VERSION GPUPOOL_VERSION
#endif

static void html_escaped(prom_buf *b, const char *s) {
  for (; *s; s++) {
    switch (*s) {
    case '<':
      prom_buf_puts(b, "&lt;");
      break;
    case '>':
      prom_buf_puts(b, "&gt;");
      break;
    case '&':
      prom_buf_puts(b, "&amp;");
      break;
    case '"':
      prom_buf_puts(b, "&quot;");
      break;
    default:
      prom_buf_putc(b, *s);
    }
  }
}

typedef struct index_rows {
  prom_buf *b;
  pool_labeler labeler;
} index_rows;

/* One table row per pool, written under the registry lock (copies only),
 * named by its /metrics label: two pools of one name on a device are
 * name and name#2 there, and here too. */
static void pool_row(gpupool *p, void *arg) {
  index_rows *rows = arg;
  prom_buf *b = rows->b;
  char label[POOL_LABEL_MAX];
  int labelled = pool_labeler_next(&rows->labeler, p, label) == 0;
  gpupool_stats st;
  if (gpupool_get_stats(p, &st) != GPUPOOL_OK)
    return;
  char name[POOL_LABEL_MAX];
  utf8_sanitize(labelled          ? label
                : gpupool_name(p) ? gpupool_name(p)
                                  : "default",
                name, sizeof name);
  prom_buf_puts(b, "<tr><td>");
  html_escaped(b, name);
  prom_buf_puts(b, "</td><td>");
  prom_buf_i64(b, gpupool_device(p));
  prom_buf_puts(b, "</td><td>");
  prom_buf_puts(b, gpupool_backend_name(p));
  prom_buf_puts(b, "</td><td>");
  prom_buf_puts(b, gpupool_strategy_name(p));
  prom_buf_puts(b, "</td><td>");
  prom_buf_i64(b, st.reserved_bytes[GPUPOOL_STAT_ALL].current);
  prom_buf_puts(b, "</td><td>");
  prom_buf_i64(b, st.allocated_bytes[GPUPOOL_STAT_ALL].current);
  prom_buf_puts(b, "</td></tr>\n");
}

void index_endpoint(const endpoint_args *args, endpoint_body *out, const char *hostname) {
  (void)args;
  prom_buf b;
  prom_buf_init(&b, 4096);
  prom_buf_puts(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>gpupool agent "
                    "on ");
  html_escaped(&b, hostname);
  prom_buf_puts(&b, "</title></head>\n<body>\n<h1>gpupool agent</h1>\n<p>version " INDEX_VERSION
                    ", host ");
  html_escaped(&b, hostname);
  prom_buf_puts(&b, "</p>\n<ul>\n"
                    "<li><a href=\"/metrics\">/metrics</a>: Prometheus metrics</li>\n"
                    "<li><a href=\"/trace?since=-30\">/trace?since=-30</a>: Chrome trace of the "
                    "allocation events of the last 30 s (open in Perfetto or chrome://tracing; "
                    "drop <code>since</code> for all the rings hold)</li>\n"
                    "<li><a href=\"/snapshot\">/snapshot</a>: segments and blocks as JSON</li>\n"
                    "<li><a href=\"/ui\">/ui</a>: live view of the pools in the browser</li>\n"
                    "<li><a href=\"/advice?format=table\">/advice</a>: which pool settings to "
                    "use, from the pools' own histories (<a href=\"/advice\">JSON</a>)</li>\n"
                    "<li><a href=\"/oom\">/oom</a>: the recent out-of-memory reports, each "
                    "explained (JSON; each one's <code>url</code> has it whole)</li>\n"
                    "<li><a href=\"/healthz\">/healthz</a>: liveness</li>\n"
                    "</ul>\n<h2>Pools</h2>\n<table border=\"1\">\n"
                    "<tr><th>pool</th><th>device</th><th>backend</th><th>strategy</th>"
                    "<th>reserved bytes</th><th>allocated bytes</th></tr>\n");
  index_rows rows = {.b = &b};
  registry_foreach(pool_row, &rows);
  pool_labeler_free(&rows.labeler);
  prom_buf_puts(&b, "</table>\n</body></html>\n");
  size_t len;
  char *data = prom_buf_take(&b, &len);
  if (!data) {
    endpoint_out_of_memory(out, "rendering the index page");
    return;
  }
  out->status = 200;
  out->content_type = "text/html; charset=utf-8";
  out->data = data;
  out->len = len;
}
