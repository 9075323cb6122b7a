/* /metrics: every pool, device and the agent's own health in the Prometheus
 * text format 0.0.4, or OpenMetrics 1.0 when the Accept header asks for it,
 * gzip-compressed when Accept-Encoding allows. */
#ifndef GPUPOOL_METRICS_H
#define GPUPOOL_METRICS_H

#include "endpoint.h"
#include "labels.h"
#include "exporters/prom_buf.h"
#include "exporters/prom_writer.h"

/* The hostname label and the constant labels of every series (agent start).
 * Before any call: gethostname() and no constant labels. */
void metrics_configure(const char *hostname, const agent_labels *labels);

/* The hostname every endpoint reports (/metrics labels, /trace, /snapshot and
 * /ui metadata, the index page): the `hostname` option, else gethostname().
 * The one copy the agent keeps while it runs. */
void metrics_hostname(char *out, size_t len);

/* Appends the whole exposition to buf. 0, or -1 when memory ran out. */
int metrics_render(prom_buf *buf, prom_format format);

/* How many threads compress one gzip'd scrape (the scraping thread and
 * threads - 1 workers, agent/http_gzip_parallel.h; 1 until set): the
 * gzip_threads option, set at agent start. A change takes effect at the next
 * gzip'd scrape, which starts the workers. */
void metrics_gzip_threads(unsigned threads);

/* Frees the buffers consecutive scrapes reuse and joins the compression
 * threads (agent stop). */
void metrics_release(void);

/* GET /metrics (no query parameters). */
void metrics_endpoint(const endpoint_args *args, endpoint_body *out);

#endif
