/* The agent's own health, served as metrics: scrapes served and how long
 * the last one took, and HTTP error responses by status code. Updated by the
 * HTTP threads with atomics, read by the scrape. */
#ifndef GPUPOOL_AGENT_HEALTH_H
#define GPUPOOL_AGENT_HEALTH_H

#include <stddef.h>
#include <stdint.h>

#define AGENT_HEALTH_CODES 8 /* distinct error codes counted; others go to the last */

typedef struct agent_health {
  double start_s;          /* when the agent started (seconds since the epoch) */
  uint64_t scrapes;        /* /metrics responses */
  uint64_t last_scrape_ns; /* server time of the last /metrics response */
  uint64_t scrape_ns_total;
  size_t ncodes;
  int code[AGENT_HEALTH_CODES];
  uint64_t errors[AGENT_HEALTH_CODES];
  uint64_t tls_handshake_failures; /* TLS connections closed before their handshake ended */
  int web_config;                  /* a web configuration file is in use */
  int web_config_ok;               /* its last (re)load succeeded */
  double web_config_ok_s;          /* when a load last succeeded */
} agent_health;

/* Zeroes the numbers (agent start). */
void agent_health_reset(double start_s);
void agent_health_scrape(uint64_t duration_ns);
void agent_health_http_error(int code);
void agent_health_get(agent_health *out);
void agent_health_tls_handshake_failed(void);
/* A load of the web configuration file: ok or not, at when_s. */
void agent_health_web_config(int ok, double when_s);

#endif
