/* The wording of configuration errors (GPUPOOL_CONF, tunables and
 * GPUPOOL_AGENT_CONF, both read through the option tables of core/kvconf):
 * a range error states the range, an unknown value lists the valid ones, a
 * likely typo gets a suggestion, and the library prints none of it. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_conf.h"
#include "core/kvconf.h"
#include "gpupool/agent.h"
#include "gpupool/gpupool.h"

static void clean_env(void) {
  unsetenv("GPUPOOL_CONF");
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("LOCAL_RANK");
}

TestSuite(conf_messages, .init = clean_env);

/* The reason gpupool_create gives for GPUPOOL_CONF=conf. */
static const char *pool_reason(const char *conf) {
  setenv("GPUPOOL_CONF", conf, 1);
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_ERR_INVALID, "'%s' was accepted", conf);
  cr_assert_null(p);
  unsetenv("GPUPOOL_CONF");
  return gpupool_last_error();
}

static char agent_err[1024];

static const char *agent_reason(const char *conf) {
  setenv("GPUPOOL_AGENT_CONF", conf, 1);
  agent_config cfg;
  cr_assert_eq(agent_config_resolve(NULL, &cfg, agent_err, sizeof agent_err), -1,
               "'%s' was accepted", conf);
  unsetenv("GPUPOOL_AGENT_CONF");
  return agent_err;
}

Test(conf_messages, pool_range_errors_state_the_range) {
  cr_expect_str_eq(
      pool_reason("max_split_size_mb:10"),
      "GPUPOOL_CONF: max_split_size_mb: 10 is out of range (21 to 1073741824, or inf)");
  cr_expect_str_eq(pool_reason("device:2000"),
                   "GPUPOOL_CONF: device: 2000 is out of range (0 to 1023)");
  cr_expect_str_eq(pool_reason("device:abc"),
                   "GPUPOOL_CONF: device: 'abc' is not a whole number (0 to 1023)");
  cr_expect_str_eq(pool_reason("garbage_collection_threshold:1"),
                   "GPUPOOL_CONF: garbage_collection_threshold: 1 is out of range (0 < x < 1)");
  cr_expect_str_eq(pool_reason("reserve_percent:51"),
                   "GPUPOOL_CONF: reserve_percent: 51 is out of range (0 <= x <= 50)");
  cr_expect_str_eq(pool_reason("round_linear_cutoff:x"),
                   "GPUPOOL_CONF: round_linear_cutoff: 'x' is not a whole number (12 to 40)");
  const char *r = pool_reason("roundup_power2_divisions:3");
  cr_expect(strstr(r, "roundup_power2_divisions: 3 is not a power of two"), "%s", r);
  cr_expect_str_eq(pool_reason("expandable_segments:yes"),
                   "GPUPOOL_CONF: expandable_segments: 'yes' is not True or False");
}

Test(conf_messages, pool_unknown_values_list_the_valid_ones) {
  cr_expect_str_eq(
      pool_reason("backend:gpu"),
      "GPUPOOL_CONF: backend: unknown value 'gpu' (valid: cuda, cuda_async, host, sim)");
  cr_expect_str_eq(pool_reason("backend:HOST"),
                   "GPUPOOL_CONF: backend: unknown value 'HOST': did "
                   "you mean host? (valid: cuda, cuda_async, host, sim)");
  cr_expect_str_eq(pool_reason("strategy:rund"), "GPUPOOL_CONF: strategy: unknown value 'rund': "
                                                 "did you mean round? (valid: bfc, round, naive)");
}

Test(conf_messages, pool_typo_in_a_key_gets_a_suggestion) {
  const char *r = pool_reason("stratgy:round");
  cr_expect(strncmp(r,
                    "GPUPOOL_CONF: unknown key 'stratgy': did you mean strategy? (known: "
                    "backend, strategy, device, name,",
                    strlen("GPUPOOL_CONF: unknown key 'stratgy': did you mean strategy? (known: "
                           "backend, strategy, device, name,")) == 0,
            "%s", r);
  cr_expect(strstr(r, "fault_seed)"), "every key is listed: %s", r);
  r = pool_reason("colour:red");
  cr_expect(strncmp(r, "GPUPOOL_CONF: unknown key 'colour' (known: backend,", 50) == 0,
            "no suggestion for a word far from every key: %s", r);
  /* the tunables string reads the same table */
  gpupool_options o = {
      .backend = GPUPOOL_BACKEND_HOST, .tunables = "max_split_sise_mb:64", .ignore_env = 1};
  gpupool *p = NULL;
  cr_expect_eq(gpupool_create(&o, &p), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "gpupool tunables: unknown key 'max_split_sise_mb': did "
                                         "you mean max_split_size_mb?"),
            "%s", gpupool_last_error());
}

Test(conf_messages, agent_messages) {
  cr_expect_str_eq(
      agent_reason("trace_events:8"),
      "GPUPOOL_AGENT_CONF: trace_events: 8 is out of range (0 (off) or 16 to 16777216)");
  cr_expect_str_eq(agent_reason("trace_events:99999999999"), "GPUPOOL_AGENT_CONF: trace_events: "
                                                             "99999999999 is out of range (0 (off) "
                                                             "or 16 to 16777216)");
  cr_expect_str_eq(agent_reason("sample_interval_ms:0"),
                   "GPUPOOL_AGENT_CONF: sample_interval_ms: 0 is out of range (1 to 86400000)");
  cr_expect_str_eq(agent_reason("trace_tick_us:1ms"), "GPUPOOL_AGENT_CONF: trace_tick_us: '1ms' is "
                                                      "not a whole number (0 (exact stamps) to "
                                                      "100000)");
  cr_expect_str_eq(agent_reason("cupti:of"), "GPUPOOL_AGENT_CONF: cupti: unknown value 'of': did "
                                             "you mean off? (valid: auto, off, force)");
  cr_expect_str_eq(agent_reason("sample_intervl_ms:5"),
                   "GPUPOOL_AGENT_CONF: unknown key 'sample_intervl_ms': did you mean "
                   "sample_interval_ms? (known: listen, sample_interval_ms, trace_events, "
                   "trace_tick_us, cupti, labels, trace_file, sd_dir, hostname, oom_reports, "
                   "oom_dir, oom_dir_max, web_config, healthz_open, allowed_hosts, size_buckets, "
                   "gzip_threads)");
  /* the integration's keys are rows of the same table */
  const char *r = agent_reason("oom_reports:5000");
  cr_expect(strstr(r, "GPUPOOL_AGENT_CONF: oom_reports: 5000 is out of range (0 to "), "%s", r);
  cr_expect_str_eq(agent_reason("healthz_open:2"),
                   "GPUPOOL_AGENT_CONF: healthz_open: 2 is out of range (0 or 1)");
  cr_expect_str_eq(agent_reason("gzip_threads:0"),
                   "GPUPOOL_AGENT_CONF: gzip_threads: 0 is out of range (1 to 64)");
  r = agent_reason("web_confg:/x.yml");
  cr_expect(strstr(r, "unknown key 'web_confg': did you mean web_config?"), "%s", r);
}

Test(conf_messages, the_library_prints_nothing, .init = cr_redirect_stderr) {
  clean_env();
  pool_reason("stratgy:round");
  setenv("GPUPOOL_AGENT_CONF", "listen:127.0.0.1:0,cupti:of", 1);
  cr_expect_eq(gpupool_agent_start(NULL), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "did you mean off?"), "%s", gpupool_last_error());
  unsetenv("GPUPOOL_AGENT_CONF");
  fflush(stderr);
  cr_expect_eq(fgetc(cr_get_redirected_stderr()), EOF, "the library printed to stderr");
}

Test(conf_messages, suggestions) {
  const char *const names[] = {"strategy", "backend", "off", "auto"};
  cr_expect_str_eq(kvconf_suggest("stratgy", names, 4), "strategy");
  cr_expect_str_eq(kvconf_suggest("STRATEGY", names, 4), "strategy", "case is no typo");
  cr_expect_str_eq(kvconf_suggest("bakend", names, 4), "backend");
  cr_expect_null(kvconf_suggest("xyz", names, 4));
  cr_expect_null(kvconf_suggest("on", names, 4), "two edits of a two-letter word is no typo");
  cr_expect_null(kvconf_suggest("colour", names, 4));
}
