#include "agent_health.h"

#include <stdatomic.h>
#include <string.h>

static _Atomic double g_start_s;
static atomic_uint_fast64_t g_scrapes, g_last_ns, g_total_ns;
/* Slots claimed by code on first use (compare-and-swap from 0). */
static atomic_int g_code[AGENT_HEALTH_CODES];
static atomic_uint_fast64_t g_errors[AGENT_HEALTH_CODES];
static atomic_uint_fast64_t g_tls_failures;
static atomic_int g_web_config, g_web_ok;
static _Atomic double g_web_ok_s;

void agent_health_reset(double start_s) {
  atomic_store(&g_start_s, start_s);
  atomic_store(&g_scrapes, 0);
  atomic_store(&g_last_ns, 0);
  atomic_store(&g_total_ns, 0);
  atomic_store(&g_tls_failures, 0);
  atomic_store(&g_web_config, 0);
  atomic_store(&g_web_ok, 0);
  atomic_store(&g_web_ok_s, 0.0);
  /* The errors the agent itself answers are there from the start, at 0, so
   * that their series exist before the first one (rate() and alerts need it). */
  static const int preset[] = {400, 404, 405};
  const int npreset = (int)(sizeof preset / sizeof preset[0]);
  for (int i = 0; i < AGENT_HEALTH_CODES; i++) {
    atomic_store(&g_code[i], i < npreset ? preset[i] : 0);
    atomic_store(&g_errors[i], 0);
  }
}

void agent_health_scrape(uint64_t duration_ns) {
  atomic_store_explicit(&g_last_ns, duration_ns, memory_order_relaxed);
  atomic_fetch_add_explicit(&g_total_ns, duration_ns, memory_order_relaxed);
  atomic_fetch_add_explicit(&g_scrapes, 1, memory_order_relaxed);
}

/* The slot of code, claimed if it has none (the last slot takes the rest
 * when the table is full). */
static int code_slot(int code) {
  int i;
  for (i = 0; i < AGENT_HEALTH_CODES - 1; i++) {
    int seen = atomic_load(&g_code[i]);
    if (seen == code)
      break;
    if (seen == 0) {
      int expected = 0;
      if (atomic_compare_exchange_strong(&g_code[i], &expected, code) || expected == code)
        break;
    }
  }
  if (i == AGENT_HEALTH_CODES - 1) { /* table full: the last slot takes the rest */
    int expected = 0;
    atomic_compare_exchange_strong(&g_code[i], &expected, code);
  }
  return i;
}

void agent_health_http_error(int code) {
  atomic_fetch_add_explicit(&g_errors[code_slot(code)], 1, memory_order_relaxed);
}

void agent_health_get(agent_health *out) {
  memset(out, 0, sizeof *out);
  out->start_s = atomic_load(&g_start_s);
  out->scrapes = atomic_load(&g_scrapes);
  out->last_scrape_ns = atomic_load(&g_last_ns);
  out->scrape_ns_total = atomic_load(&g_total_ns);
  out->tls_handshake_failures = atomic_load(&g_tls_failures);
  out->web_config = atomic_load(&g_web_config);
  out->web_config_ok = atomic_load(&g_web_ok);
  out->web_config_ok_s = atomic_load(&g_web_ok_s);
  for (int i = 0; i < AGENT_HEALTH_CODES; i++) {
    int code = atomic_load(&g_code[i]);
    if (!code)
      continue;
    out->code[out->ncodes] = code;
    out->errors[out->ncodes] = atomic_load(&g_errors[i]);
    out->ncodes++;
  }
}

void agent_health_tls_handshake_failed(void) {
  atomic_fetch_add_explicit(&g_tls_failures, 1, memory_order_relaxed);
}

void agent_health_web_config(int ok, double when_s) {
  /* Basic auth and the rate limit (a reload may add them) answer these: their
   * series are there from the start, at 0, like 400, 404 and 405's. */
  code_slot(401);
  code_slot(429);
  atomic_store(&g_web_config, 1);
  atomic_store(&g_web_ok, ok);
  if (ok)
    atomic_store(&g_web_ok_s, when_s);
}
