#include "metrics_agent.h"

#include <stdio.h>

#include "agent_health.h"

#ifdef GPUPOOL_VERSION_STRING
#define BUILD_VERSION GPUPOOL_VERSION_STRING
#else
#define BUILD_VERSION GPUPOOL_VERSION
#endif

void metrics_write_agent(prom_writer *w, const metrics_snapshot *s) {
  const char *labels = metrics_labels(s, s->process_labels);
  prom_family(w, "gpupool_build", PROM_INFO,
              "The gpupool library: version and what it was built with.");
#ifdef GPUPOOL_HAVE_CUDA
  const char *cuda = "yes";
#else
  const char *cuda = "no";
#endif
#ifdef GPUPOOL_HAVE_ZLIB
  const char *zlib = "yes";
#else
  const char *zlib = "no";
#endif
  prom_label build[3] = {{"version", BUILD_VERSION}, {"cuda", cuda}, {"zlib", zlib}};
  prom_gauge_u64(w, labels, build, 3, 1);

  prom_family(w, "gpupool_agent_pools", PROM_GAUGE, "Live pools in the process.");
  prom_gauge_u64(w, labels, NULL, 0, s->npools);

  agent_health h;
  agent_health_get(&h);
  prom_family(w, "gpupool_agent_scrapes", PROM_COUNTER,
              "/metrics responses served (before this one).");
  prom_counter(w, labels, NULL, 0, h.scrapes, h.start_s);
  prom_family(w, "gpupool_agent_scrape_duration_seconds", PROM_SUMMARY,
              "Server time of /metrics responses (before this one).");
  prom_summary(w, labels, NULL, 0, (double)h.scrape_ns_total / 1e9, h.scrapes, h.start_s);
  prom_family(w, "gpupool_agent_last_scrape_duration_seconds", PROM_GAUGE,
              "Server time of the previous /metrics response.");
  prom_gauge_double(w, labels, NULL, 0, (double)h.last_scrape_ns / 1e9);
  prom_family(w, "gpupool_agent_http_errors", PROM_COUNTER,
              "HTTP error responses of the agent, by status code.");
  for (size_t i = 0; i < h.ncodes; i++) {
    char code[12];
    snprintf(code, sizeof code, "%d", h.code[i]);
    prom_label l = {"code", code};
    prom_counter(w, labels, &l, 1, h.errors[i], h.start_s);
  }
}
