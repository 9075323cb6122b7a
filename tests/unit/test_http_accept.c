/* Content negotiation: Accept qualities and gzip in Accept-Encoding. */
#include <criterion/criterion.h>

#include "agent/http_accept.h"

#define PROMETHEUS_ACCEPT                                                                          \
  "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"  \
  "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

Test(http_accept, prometheus_prefers_openmetrics) {
  cr_assert_eq(http_accept_q(PROMETHEUS_ACCEPT, "application/openmetrics-text", 0), 1.0);
  cr_assert_float_eq(http_accept_q(PROMETHEUS_ACCEPT, "text/plain", 0), 0.5, 1e-12);
}

Test(http_accept, wildcards_and_specificity) {
  cr_assert_float_eq(http_accept_q("text/*;q=0.3, */*;q=0.1", "text/plain", 0), 0.3, 1e-12);
  cr_assert_float_eq(http_accept_q("*/*;q=0.2", "text/plain", 0), 0.2, 1e-12);
  cr_assert_eq(http_accept_q("application/json", "text/plain", 0), 0.0);
  cr_assert_eq(http_accept_q("text/plain;q=0", "text/plain", 0), 0.0);
  cr_assert_eq(http_accept_q(NULL, "text/plain", 1), 1.0);
  cr_assert_eq(http_accept_q("", "text/plain", 0), 0.0);
  cr_assert_eq(http_accept_q(" TEXT/PLAIN ; q=1 ", "text/plain", 0), 1.0);
}

/* OpenMetrics as client_golang negotiates it: only versions 1.0.0, 0.0.1
 * or none; another version's element does not match at all. */
Test(http_accept, openmetrics_versions) {
  static const char *const versions[] = {"1.0.0", "0.0.1", NULL};
  const char *om = "application/openmetrics-text";
  char v[16];
  cr_assert_eq(http_accept_q_version(PROMETHEUS_ACCEPT, om, versions, v, sizeof v), 1.0);
  cr_assert_str_eq(v, "1.0.0");
  cr_assert_eq(http_accept_q_version("application/openmetrics-text;version=2.0.0", om, versions, v,
                                     sizeof v),
               0.0);
  cr_assert_float_eq(http_accept_q_version("application/openmetrics-text;version=2.0.0,"
                                           "application/openmetrics-text; version=\"0.0.1\";q=0.4",
                                           om, versions, v, sizeof v),
                     0.4, 1e-12);
  cr_assert_str_eq(v, "0.0.1");
  cr_assert_eq(http_accept_q_version("application/openmetrics-text", om, versions, v, sizeof v),
               1.0);
  cr_assert_str_eq(v, "");
  cr_assert_eq(http_accept_q_version("*/*", om, versions, v, sizeof v), 0.0, "not by a wildcard");
}

Test(http_accept, gzip) {
  cr_assert(http_accepts_gzip("gzip"));
  cr_assert(http_accepts_gzip("deflate, gzip;q=0.5"));
  cr_assert(http_accepts_gzip("x-gzip"));
  cr_assert(http_accepts_gzip("*"));
  cr_assert_not(http_accepts_gzip("gzip;q=0"));
  cr_assert_not(http_accepts_gzip("gzip;q=0, *;q=1"), "an explicit refusal beats the wildcard");
  cr_assert_not(http_accepts_gzip("identity"));
  cr_assert_not(http_accepts_gzip(NULL));
}
