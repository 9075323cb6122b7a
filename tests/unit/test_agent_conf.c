/* The agent's configuration: every key of GPUPOOL_AGENT_CONF and of the
 * options struct, its defaults, and the refusal of bad values. */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_conf.h"
#include "agent/labels.h"

static agent_config cfg;
static char err[512];

static void clean_env(void) {
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("LOCAL_RANK");
}

static int resolve_env(const char *conf) {
  setenv("GPUPOOL_AGENT_CONF", conf, 1);
  err[0] = '\0';
  return agent_config_resolve(NULL, &cfg, err, sizeof err);
}

TestSuite(agent_conf, .init = clean_env);

Test(agent_conf, defaults) {
  cr_assert_eq(agent_config_resolve(NULL, &cfg, err, sizeof err), 0, "%s", err);
  cr_assert_str_eq(cfg.listen_host, "127.0.0.1");
  cr_assert_eq(cfg.listen_port, 9477);
  cr_assert_eq(cfg.listen_off, 0);
  cr_assert_eq(cfg.sample_interval_ms, 1000);
  cr_assert_eq(cfg.trace_events, 65536);
  cr_assert_eq(cfg.trace_tick_us, 1000);
  cr_assert_eq(cfg.cupti, GPUPOOL_CUPTI_AUTO);
  cr_assert_eq(cfg.labels.n, 0);
  cr_assert_str_eq(cfg.trace_file, "");
  cr_assert_str_eq(cfg.sd_dir, "");
  cr_assert_neq(cfg.hostname[0], '\0');
  cr_assert_eq(cfg.gzip_threads, agent_default_gzip_threads());
  cr_assert_eq(cfg.oom_dir_max, 64);
}

Test(agent_conf, oom_dir_max) {
  cr_assert_eq(resolve_env("oom_dir_max:0"), 0, "%s", err);
  cr_assert_eq(cfg.oom_dir_max, 0, "0: no bound");
  cr_assert_eq(resolve_env("oom_dir_max:1000000"), 0, "%s", err);
  cr_assert_eq(cfg.oom_dir_max, 1000000);
  cr_assert_neq(resolve_env("oom_dir_max:1000001"), 0);
  cr_assert(strstr(err, "oom_dir_max") != NULL, "%s", err);
}

Test(agent_conf, every_key) {
  cr_assert_eq(resolve_env("listen:0.0.0.0:9500, sample_interval_ms:250, trace_events:1024, "
                           "trace_tick_us:250, cupti:off, labels:team=ml;run=7, "
                           "trace_file:/tmp/t.json, sd_dir:/tmp/sd, hostname:node-1"),
               0, "%s", err);
  cr_assert_str_eq(cfg.listen_host, "0.0.0.0");
  cr_assert_eq(cfg.listen_port, 9500);
  cr_assert_eq(cfg.sample_interval_ms, 250);
  cr_assert_eq(cfg.trace_events, 1024);
  cr_assert_eq(cfg.trace_tick_us, 250);
  cr_assert_eq(cfg.cupti, GPUPOOL_CUPTI_OFF);
  cr_assert_eq(cfg.labels.n, 2);
  cr_assert_str_eq(cfg.labels.name[0], "team");
  cr_assert_str_eq(cfg.labels.value[0], "ml");
  cr_assert_str_eq(cfg.labels.name[1], "run");
  cr_assert_str_eq(cfg.labels.value[1], "7");
  cr_assert_str_eq(cfg.trace_file, "/tmp/t.json");
  cr_assert_str_eq(cfg.sd_dir, "/tmp/sd");
  cr_assert_str_eq(cfg.hostname, "node-1");
}

/* The paths the agent uses after the start are made absolute against the
 * working directory of the start (the program may chdir() later); absolute
 * ones are kept as given, and one that grows too long is refused. */
Test(agent_conf, relative_paths_are_made_absolute) {
  char cwd[PATH_MAX], want[PATH_MAX + 32];
  cr_assert_eq(chdir("/tmp"), 0);
  cr_assert_not_null(getcwd(cwd, sizeof cwd));
  cr_assert_eq(resolve_env("trace_file:t.json,sd_dir:sd,oom_dir:./oom,web_config:../tmp/w.yml"), 0,
               "%s", err);
  snprintf(want, sizeof want, "%s/t.json", cwd);
  cr_expect_str_eq(cfg.trace_file, want);
  snprintf(want, sizeof want, "%s/sd", cwd);
  cr_expect_str_eq(cfg.sd_dir, want);
  snprintf(want, sizeof want, "%s/./oom", cwd);
  cr_expect_str_eq(cfg.oom_dir, want);
  snprintf(want, sizeof want, "%s/../tmp/w.yml", cwd);
  cr_expect_str_eq(cfg.web_config, want);
  cr_assert_eq(chdir("/"), 0);
  cr_assert_eq(resolve_env("trace_file:t.json,oom_dir:/var/tmp"), 0, "%s", err);
  cr_expect_str_eq(cfg.trace_file, "/t.json", "no '//' at the root");
  cr_expect_str_eq(cfg.oom_dir, "/var/tmp");
  cr_expect_str_eq(cfg.sd_dir, "", "none stays none");
  /* PATH_MAX - 1 bytes fit as given, not after "/tmp/" */
  cr_assert_eq(chdir("/tmp"), 0);
  char name[PATH_MAX];
  memset(name, 'x', sizeof name - 1);
  name[sizeof name - 1] = '\0';
  unsetenv("GPUPOOL_AGENT_CONF");
  gpupool_agent_options o = {.trace_file = name};
  cr_expect_eq(agent_config_resolve(&o, &cfg, err, sizeof err), -1);
  cr_expect(strstr(err, "trace_file 'xxx") && strstr(err, "path too long once made absolute"), "%s",
            err);
}

/* The grammar is GPUPOOL_CONF's: one trailing ',' is allowed, two are not. */
Test(agent_conf, a_trailing_comma_is_allowed) {
  cr_assert_eq(resolve_env("sample_interval_ms:250,"), 0, "%s", err);
  cr_expect_eq(cfg.sample_interval_ms, 250);
  cr_expect_eq(resolve_env("sample_interval_ms:250,,"), -1);
  cr_expect(strstr(err, "stray ','"), "%s", err);
}

Test(agent_conf, listen_forms) {
  cr_assert_eq(resolve_env("listen:[::1]:9600"), 0, "%s", err);
  cr_assert_str_eq(cfg.listen_host, "::1");
  cr_assert_eq(cfg.listen_port, 9600);
  cr_assert_eq(resolve_env("listen::9601"), 0, "%s", err);
  cr_assert_str_eq(cfg.listen_host, "", "':port' listens on every interface");
  cr_assert_eq(cfg.listen_port, 9601);
  cr_assert_eq(resolve_env("listen:localhost"), 0, "%s", err);
  cr_assert_str_eq(cfg.listen_host, "localhost");
  cr_assert_eq(cfg.listen_port, 9477, "no port: the default one");
  cr_assert_eq(resolve_env("listen:[::]"), 0, "%s", err);
  cr_assert_str_eq(cfg.listen_host, "::");
  cr_assert_eq(resolve_env("listen:127.0.0.1:0"), 0, "%s", err);
  cr_assert_eq(cfg.listen_port, 0);
  cr_assert_eq(resolve_env("listen:off"), 0, "%s", err);
  cr_assert_eq(cfg.listen_off, 1);
}

Test(agent_conf, bad_listen_values) {
  const char *bad[] = {"listen:::1:9477",   "listen:[::1",    "listen:[]:80",     "listen:[::1]x",
                       "listen:host:65536", "listen:host:-1", "listen:host:12ab", "listen:host:"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(resolve_env(bad[i]), -1, "%s was accepted", bad[i]);
    cr_assert(!strncmp(err, "GPUPOOL_AGENT_CONF: listen: '", 29),
              "the reason names where the value came from and the key: %s", err);
  }
  /* the struct's field: the key alone, as for its other fields */
  clean_env();
  gpupool_agent_options o = {.listen = "[::1"};
  cr_assert_eq(agent_config_resolve(&o, &cfg, err, sizeof err), -1);
  cr_assert_str_eq(err, "listen: '[::1': missing ']'");
}

Test(agent_conf, bad_values_are_refused_with_the_key_named) {
  const struct {
    const char *conf, *key;
  } bad[] = {
      {"sample_interval_ms:0", "sample_interval_ms"},
      {"sample_interval_ms:fast", "sample_interval_ms"},
      {"sample_interval_ms:86400001", "sample_interval_ms"},
      {"trace_events:8", "trace_events"},
      {"trace_events:-1", "trace_events"},
      {"trace_events:99999999999", "trace_events"},
      {"trace_tick_us:-1", "trace_tick_us"},
      {"trace_tick_us:100001", "trace_tick_us"},
      {"trace_tick_us:1ms", "trace_tick_us"},
      {"trace_tick_us:", "trace_tick_us"},
      {"cupti:maybe", "cupti"},
      {"gzip_threads:0", "gzip_threads"},
      {"gzip_threads:65", "gzip_threads"},
      {"gzip_threads:-1", "gzip_threads"},
      {"gzip_threads:four", "gzip_threads"},
      {"gzip_threads:", "gzip_threads"},
      {"labels:team", "labels"},
      {"labels:9team=a", "labels"},
      {"labels:te-am=a", "labels"},
      {"labels:team=", "labels"},
      {"labels:team=a;team=b", "labels"},
      {"labels:a=1;", "labels"},
      {"labels:job=x", "job"},
      {"labels:instance=x", "instance"},
      {"labels:pod=x", "pod"},
      {"labels:namespace=x", "namespace"},
      {"labels:hostname=x", "hostname"},
      {"labels:device=x", "device"},
      {"labels:UUID=x", "UUID"},
      {"labels:pool=x", "pool"},
      {"labels:__name__=x", "__name__"},
      {"colour:red", "colour"},
      {"listen", "listen"},
      {"listen:", "listen"},
      {"a:1,,b:2", ""},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(resolve_env(bad[i].conf), -1, "'%s' was accepted", bad[i].conf);
    cr_assert(strstr(err, "GPUPOOL_AGENT_CONF"), "%s", err);
    cr_assert(strstr(err, bad[i].key), "'%s': the reason should name %s: %s", bad[i].conf,
              bad[i].key, err);
  }
}

Test(agent_conf, labels_take_utf8_and_refuse_invalid_bytes) {
  cr_assert_eq(resolve_env("labels:team=équipe ☃"), 0, "%s", err);
  cr_assert_str_eq(cfg.labels.value[0], "équipe ☃");
  cr_assert_eq(resolve_env("labels:team=\xff\xfe"), -1);
  cr_assert(strstr(err, "UTF-8"), "%s", err);
}

Test(agent_conf, trace_events_zero_turns_events_off) {
  cr_assert_eq(resolve_env("trace_events:0"), 0, "%s", err);
  cr_assert_eq(cfg.trace_events, 0);
}

Test(agent_conf, trace_tick_us_zero_means_exact_stamps) {
  cr_assert_eq(resolve_env("trace_tick_us:0"), 0, "%s", err);
  cr_assert_eq(cfg.trace_tick_us, 0);
  cr_assert_eq(resolve_env("trace_tick_us:100000"), 0, "%s", err);
  cr_assert_eq(cfg.trace_tick_us, 100000);
}

Test(agent_conf, gzip_threads_from_1_to_64_default_at_most_4) {
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  unsigned d = agent_default_gzip_threads();
  cr_assert(d >= 1 && d <= 4 && (long)d <= cpus, "default %u with %ld CPUs", d, cpus);
  cr_assert_eq(resolve_env("gzip_threads:1"), 0, "%s", err);
  cr_assert_eq(cfg.gzip_threads, 1);
  cr_assert_eq(resolve_env("gzip_threads:64"), 0, "%s", err);
  cr_assert_eq(cfg.gzip_threads, 64);
  cr_assert_eq(resolve_env("gzip_threads:0"), -1);
  cr_assert(strstr(err, "gzip_threads") && strstr(err, "64"), "the key and the range: %s", err);
}

Test(agent_conf, unknown_keys_list_trace_tick_us) {
  cr_assert_eq(resolve_env("trace_tick:5"), -1);
  cr_assert(strstr(err, "trace_tick_us"), "%s", err);
}

Test(agent_conf, environment_wins_over_the_struct) {
  gpupool_agent_options o = {.listen = "127.0.0.1:7000",
                             .sample_interval_ms = 50,
                             .trace_events = 4096,
                             .cupti = GPUPOOL_CUPTI_FORCE,
                             .labels = "a=1",
                             .hostname = "from-struct"};
  setenv("GPUPOOL_AGENT_CONF", "listen:127.0.0.1:7001,hostname:from-env", 1);
  cr_assert_eq(agent_config_resolve(&o, &cfg, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cfg.listen_port, 7001);
  cr_assert_str_eq(cfg.hostname, "from-env");
  cr_assert_eq(cfg.sample_interval_ms, 50, "fields the environment does not set stay");
  cr_assert_eq(cfg.trace_events, 4096);
  cr_assert_eq(cfg.cupti, GPUPOOL_CUPTI_FORCE);
  cr_assert_str_eq(cfg.labels.value[0], "1");

  o.ignore_env = 1;
  cr_assert_eq(agent_config_resolve(&o, &cfg, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cfg.listen_port, 7000);
  cr_assert_str_eq(cfg.hostname, "from-struct");
}

Test(agent_conf, struct_fields_are_checked_too) {
  gpupool_agent_options o = {.ignore_env = 1, .trace_events = 3};
  cr_assert_eq(agent_config_resolve(&o, &cfg, err, sizeof err), -1);
  cr_assert(strstr(err, "trace_events"), "%s", err);
  gpupool_agent_options o2 = {.ignore_env = 1, .labels = "pool=x"};
  cr_assert_eq(agent_config_resolve(&o2, &cfg, err, sizeof err), -1);
  cr_assert(strstr(err, "pool"), "%s", err);
  gpupool_agent_options o3 = {.ignore_env = 1, .trace_off = 1};
  cr_assert_eq(agent_config_resolve(&o3, &cfg, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cfg.trace_events, 0);
  gpupool_agent_options o4 = {.ignore_env = 1, .trace_tick_us = 100001};
  cr_assert_eq(agent_config_resolve(&o4, &cfg, err, sizeof err), -1);
  cr_assert(strstr(err, "trace_tick_us"), "%s", err);
  gpupool_agent_options o5 = {.ignore_env = 1, .trace_tick_us = 500};
  cr_assert_eq(agent_config_resolve(&o5, &cfg, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cfg.trace_tick_us, 500);
  gpupool_agent_options o6 = {.ignore_env = 1, .trace_tick_us = 500, .trace_tick_off = 1};
  cr_assert_eq(agent_config_resolve(&o6, &cfg, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cfg.trace_tick_us, 0, "trace_tick_off: every stamp exact");
  setenv("GPUPOOL_AGENT_CONF", "trace_tick_us:2000", 1);
  o6.ignore_env = 0;
  cr_assert_eq(agent_config_resolve(&o6, &cfg, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cfg.trace_tick_us, 2000, "the environment wins over the struct");
}

Test(agent_conf, local_rank_moves_the_port) {
  setenv("LOCAL_RANK", "3", 1);
  cr_assert_eq(agent_config_resolve(NULL, &cfg, err, sizeof err), 0, "%s", err);
  cr_assert_eq(cfg.listen_port, 9480);
  cr_assert_eq(resolve_env("listen:0.0.0.0:9500"), 0, "%s", err);
  cr_assert_eq(cfg.listen_port, 9503);
  cr_assert_eq(resolve_env("listen:127.0.0.1:0"), 0, "%s", err);
  cr_assert_eq(cfg.listen_port, 0, "an ephemeral port stays ephemeral");
  setenv("LOCAL_RANK", "two", 1);
  cr_assert_eq(resolve_env("listen:127.0.0.1:9477"), -1);
  cr_assert(strstr(err, "LOCAL_RANK"), "%s", err);
  gpupool_agent_options o = {.ignore_env = 1};
  cr_assert_eq(agent_config_resolve(&o, &cfg, err, sizeof err), 0, "ignore_env ignores it");
  cr_assert_eq(cfg.listen_port, 9477);
}

Test(agent_conf, label_name_rules) {
  cr_assert(label_name_valid("_a1"));
  cr_assert(label_name_valid("Team"));
  cr_assert_not(label_name_valid("1a"));
  cr_assert_not(label_name_valid(""));
  cr_assert_not(label_name_valid("a.b"));
  cr_assert(label_name_reserved("__meta"));
  cr_assert(label_name_reserved("le"));
  cr_assert_not(label_name_reserved("team"));
}

Test(agent_conf, utf8_sanitize_keeps_whole_characters) {
  char out[8];
  utf8_sanitize("ab\xffz", out, sizeof out);
  cr_assert_str_eq(out, "ab?z");
  utf8_sanitize("abcdé☃", out, sizeof out); /* 'é' fits, the snowman (3 bytes) does not */
  cr_assert_str_eq(out, "abcdé");
  cr_assert(utf8_valid("é☃"));
  cr_assert_not(utf8_valid("\xc0\x80"), "overlong encodings are not UTF-8");
  cr_assert_not(utf8_valid("\xed\xa0\x80"), "surrogates are not UTF-8");
}

/* gpupool_agent_start's reason for GPUPOOL_AGENT_CONF=conf, copied. */
static void start_reason(const char *conf, char *out, size_t len) {
  setenv("GPUPOOL_AGENT_CONF", conf, 1);
  cr_assert_eq(gpupool_agent_start(NULL), GPUPOOL_ERR_INVALID, "the agent started with '%s'", conf);
  unsetenv("GPUPOOL_AGENT_CONF");
  snprintf(out, len, "%s", gpupool_last_error());
}

Test(agent_conf, check_refuses_what_the_start_refuses_with_its_reason) {
  static const char *const bad[] = {
      "garbage",
      "no_such_key:1",
      "sample_interval_ms:0",
      "cupti:sometimes",
      "listen:host:-1",
      "trace_events:5",
      "labels:9bad=x",
      "listen:127.0.0.1:0,,",
      "listen:off,sd_dir:/tmp",
      "listen:off,web_config:/tmp/web.yml",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char expected[1024];
    start_reason(bad[i], expected, sizeof expected);
    cr_expect_eq(gpupool_agent_conf_check(bad[i]), GPUPOOL_ERR_INVALID, "'%s' was accepted",
                 bad[i]);
    cr_expect_str_eq(gpupool_last_error(), expected, "'%s'", bad[i]);
  }
  cr_expect_eq(gpupool_agent_port(), 0);
}

Test(agent_conf, check_starts_nothing_and_reads_conf_not_the_environment) {
  setenv("GPUPOOL_AGENT_CONF", "garbage", 1);
  cr_expect_eq(gpupool_agent_conf_check(NULL), GPUPOOL_OK);
  cr_expect_eq(gpupool_agent_conf_check(""), GPUPOOL_OK);
  cr_expect_eq(gpupool_agent_conf_check("listen:127.0.0.1:0,labels:rank=3,cupti:off"), GPUPOOL_OK,
               "%s", gpupool_last_error());
  cr_expect_eq(gpupool_agent_port(), 0, "checking starts no agent");
  setenv("LOCAL_RANK", "70000", 1); /* read, as the start reads it */
  cr_expect_eq(gpupool_agent_conf_check("listen:127.0.0.1:9477"), GPUPOOL_ERR_INVALID);
  cr_expect_str_eq(gpupool_last_error(), "gpupool agent: LOCAL_RANK='70000' is not a rank that "
                                         "fits the port 9477");
}

/* An empty listen in the options struct is the default address, as every
 * other empty string of the struct is its default (it used to read as
 * ":9477", every interface); the configuration string refuses an empty
 * value as before. */
Test(agent_conf, an_empty_listen_option_is_the_default) {
  gpupool_agent_options o = {.listen = "", .ignore_env = 1};
  cr_assert_eq(agent_config_resolve(&o, &cfg, err, sizeof err), 0, "%s", err);
  cr_expect_str_eq(cfg.listen_host, "127.0.0.1");
  cr_expect_eq(cfg.listen_port, 9477);
  cr_expect_eq(cfg.listen_off, 0);
  cr_expect_eq(resolve_env("listen:"), -1);
  cr_expect(strstr(err, "listen: empty value"), "%s", err);
}
