#include "metrics_agent.h"

#include <stdio.h>

#include "agent_health.h"
#include "oom_store.h"

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

  oom_store_counts oc;
  oom_store_get_counts(&oc);
  prom_family(w, "gpupool_oom_reports", PROM_COUNTER,
              "OOM reports recorded (one per failed allocation of any pool; see /oom).");
  prom_counter(w, labels, NULL, 0, oc.total, h.start_s);
  prom_family(w, "gpupool_oom_reports_kept", PROM_GAUGE,
              "OOM reports the agent holds for /oom (the last oom_reports of them).");
  prom_gauge_u64(w, labels, NULL, 0, oc.kept);
  prom_family(w, "gpupool_oom_report_write_errors", PROM_COUNTER,
              "OOM reports that could not be written to oom_dir.");
  prom_counter(w, labels, NULL, 0, oc.write_errors, h.start_s);
  if (!h.web_config)
    return;
  prom_family(w, "gpupool_agent_web_config_last_reload_successful", PROM_GAUGE,
              "Whether the last load of the web configuration file (TLS, basic auth) "
              "succeeded.");
  prom_gauge_u64(w, labels, NULL, 0, (uint64_t)h.web_config_ok);
  prom_family(w, "gpupool_agent_web_config_last_reload_success_timestamp_seconds", PROM_GAUGE,
              "When the web configuration file was last loaded successfully.");
  prom_gauge_double(w, labels, NULL, 0, h.web_config_ok_s);
  prom_family(w, "gpupool_agent_tls_handshake_failures", PROM_COUNTER,
              "TLS connections closed before their handshake completed (plain HTTP to the "
              "TLS port, a client that does not trust the certificate, a refused client "
              "certificate).");
  prom_counter(w, labels, NULL, 0, h.tls_handshake_failures, h.start_s);
}
