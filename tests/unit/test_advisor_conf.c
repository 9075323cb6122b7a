/* The configurations the advisor takes and writes: the keys a replay refuses
 * (backend, device, capacity, name, fault injection) are refused in every
 * spelling the pool's parser reads, through gpupool_replay, both kinds of
 * gpupool_advise candidate and gpupool-advise --conf; the PyTorch lines are
 * in the spelling PyTorch's parser takes; the live pool's line is one the
 * pool's parser takes back. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "advisor/live.h"
#include "gpupool/advisor.h"
#include "helpers/child_output.h"
#include "pool/pool_internal.h"

static char path[] = "/tmp/gpupool_advisor_confXXXXXX";
static gpupool_history *hist;

static void setup(void) {
  int fd = mkstemp(path);
  cr_assert(fd >= 0);
  FILE *f = fdopen(fd, "w");
  for (int i = 1; i <= 8; i++)
    fprintf(f, "a %d %llu 0\n", i, (unsigned long long)(i * MiB + 100));
  for (int i = 1; i <= 8; i += 2)
    fprintf(f, "f %d\n", i);
  fclose(f);
  cr_assert_eq(gpupool_history_load(path, NULL, NULL, &hist), GPUPOOL_OK, "%s",
               gpupool_last_error());
}

static void teardown(void) {
  gpupool_history_free(hist);
  unlink(path);
}

TestSuite(advisor_conf, .init = setup, .fini = teardown);

/* Each refused key with a value the pool would take: a bypass would replay
 * on the host backend, a real device, with faults, or on a device shrunk by
 * a cap. */
static const char *const refused[][2] = {
    {"backend", "host"},   {"device", "0"},        {"name", "x"},       {"host_capacity_mb", "1"},
    {"fault_rate", "0.5"}, {"fault_every_n", "2"}, {"fault_seed", "3"}, {"memory_fraction", "0.5"},
};
#define N_REFUSED (sizeof refused / sizeof refused[0])

/* Ways to write "KEY:VALUE" that kvconf reads as that key: C's white space
 * around the key, alone or after another pair. */
static const char *const spellings[] = {
    "%s:%s",
    " %s:%s",
    "%s :%s",
    "\t%s:%s",
    "%s\t:%s",
    " \t%s \t: %s ",
    "\n%s\r:%s",
    "\v%s\f:%s",
    "%s: %s",
    "strategy:bfc, %s :%s",
    "strategy:bfc,\t%s\t:%s",
};
#define N_SPELLINGS (sizeof spellings / sizeof spellings[0])

static void spell(char *out, size_t n, size_t s, size_t k) {
  snprintf(out, n, spellings[s], refused[k][0], refused[k][1]);
}

/* The error names the key. */
static void expect_key_refused(gpupool_status st, const char *key, const char *conf,
                               const char *via) {
  cr_expect_eq(st, GPUPOOL_ERR_INVALID, "%s accepted \"%s\"", via, conf);
  char want[64];
  snprintf(want, sizeof want, "key %s ", key);
  cr_expect(strstr(gpupool_last_error(), want), "%s \"%s\": %s", via, conf, gpupool_last_error());
}

Test(advisor_conf, refused_keys_in_every_spelling_replay) {
  char conf[128];
  for (size_t k = 0; k < N_REFUSED; k++)
    for (size_t s = 0; s < N_SPELLINGS; s++) {
      spell(conf, sizeof conf, s, k);
      gpupool_replay_result r;
      expect_key_refused(gpupool_replay(hist, conf, 80 * 1024 * MiB, &r), refused[k][0], conf,
                         "gpupool_replay");
    }
}

Test(advisor_conf, refused_keys_in_every_spelling_advise) {
  char conf[128];
  for (size_t k = 0; k < N_REFUSED; k++)
    for (size_t s = 0; s < N_SPELLINGS; s++) {
      spell(conf, sizeof conf, s, k);
      const char *extra[] = {conf};
      gpupool_advice_options cur = {
          .current = conf, .no_defaults = 1, .no_capacity = 1, .threads = 1, .max_added_ms = -1};
      gpupool_advice_options ext = {.extra = extra,
                                    .n_extra = 1,
                                    .no_defaults = 1,
                                    .no_capacity = 1,
                                    .threads = 1,
                                    .max_added_ms = -1};
      gpupool_advice *a = NULL;
      expect_key_refused(gpupool_advise(hist, &cur, &a), refused[k][0], conf, "current");
      cr_expect_null(a);
      gpupool_advice_free(a);
      a = NULL;
      expect_key_refused(gpupool_advise(hist, &ext, &a), refused[k][0], conf, "extra");
      cr_expect_null(a);
      gpupool_advice_free(a);
    }
}

/* A spelling the pool refuses as malformed is refused too (it never reaches
 * a replay), and the allowed keys with white space still replay. */
Test(advisor_conf, malformed_and_allowed) {
  gpupool_replay_result r;
  cr_expect_eq(gpupool_replay(hist, "strategy:bfc,backend", 80 * 1024 * MiB, &r),
               GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "not key:value"), "%s", gpupool_last_error());
  cr_expect_eq(
      gpupool_replay(hist, " strategy :\tround ,\tround_linear_cutoff : 20 ", 80 * 1024 * MiB, &r),
      GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_gt(r.peak_reserved, 0);
}

/* Runs gpupool-advise with args (NULL-terminated after the program name)
 * and its standard output on the file out; its exit status, and its
 * standard error in err. */
static int run_advise_to(const char *out, char *err, size_t errlen, const char *const *args) {
  const char *bin = getenv("GPUPOOL_BINARY_DIR");
  if (!bin)
    cr_skip("GPUPOOL_BINARY_DIR is not set (run through ctest)");
  char prog[4096];
  snprintf(prog, sizeof prog, "%s/tools/gpupool-advise", bin);
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    int fd = open(out, O_WRONLY);
    dup2(fd, 1);
    dup2(fds[1], 2);
    close(fds[0]);
    execv(prog, (char *const *)args);
    _exit(127);
  }
  close(fds[1]);
  int status = child_output(pid, fds[0], err, errlen);
  cr_assert(WIFEXITED(status));
  return WEXITSTATUS(status);
}

static int run_advise(char *err, size_t errlen, const char *const *args) {
  return run_advise_to("/dev/null", err, errlen, args);
}

Test(advisor_conf, refused_keys_in_every_spelling_cli) {
  char conf[128], err[1024];
  for (size_t k = 0; k < N_REFUSED; k++)
    for (size_t s = 0; s < N_SPELLINGS; s++) {
      spell(conf, sizeof conf, s, k);
      const char *args[] = {
          "gpupool-advise", "--only", "--no-capacity", "--conf", conf, path, NULL};
      cr_expect_eq(run_advise(err, sizeof err, args), 1, "--conf \"%s\": %s", conf, err);
      char want[64];
      snprintf(want, sizeof want, "key %s ", refused[k][0]);
      cr_expect(strstr(err, want), "--conf \"%s\": %s", conf, err);
    }
}

/* A --capacity smaller than the --step is a usage error (exit 2), found
 * before the history is read. */
Test(advisor_conf, cli_capacity_below_the_step) {
  char err[1024];
  const char *tiny[] = {"gpupool-advise", "--capacity", "0.001", path, NULL};
  cr_expect_eq(run_advise(err, sizeof err, tiny), 2, "%s", err);
  cr_expect(strstr(err, "--capacity 0.001 GiB is less than the --step of 2 MiB"), "%s", err);
  const char *step[] = {"gpupool-advise", "--capacity", "0.004", "--step", "8",
                        "/nonexistent",   NULL};
  cr_expect_eq(run_advise(err, sizeof err, step), 2, "%s", err);
  cr_expect(strstr(err, "less than the --step of 8 MiB"), "%s", err);
  const char *fits[] = {"gpupool-advise", "--capacity", "0.002", "--only", "--current", "",
                        "--no-capacity",  path,         NULL};
  cr_expect_eq(run_advise(err, sizeof err, fits), 0, "%s", err);
}

/* Standard output on a full disk: the advice (or the usage text) is lost,
 * so the exit status is 1 and stderr says why. */
Test(advisor_conf, cli_output_to_a_full_disk_fails) {
  char err[1024];
  const char *advise[] = {"gpupool-advise", "--only", "--no-capacity", "--current", "", path, NULL};
  const char *help[] = {"gpupool-advise", "--help", NULL};
  const char *const *runs[] = {advise, help};
  for (size_t i = 0; i < 2; i++) {
    cr_expect_eq(run_advise_to("/dev/full", err, sizeof err, runs[i]), 1, "%s: %s", runs[i][1],
                 err);
    cr_expect(strstr(err, "gpupool-advise: cannot write to standard output: ") &&
                  strstr(err, strerror(ENOSPC)),
              "%s: %s", runs[i][1], err);
  }
}

/* PyTorch's checks of PYTORCH_CUDA_ALLOC_CONF (c10/core/AllocatorConfig.h and
 * .cpp, ConfigTokenizer and AcceleratorAllocatorConfig::parseArgs) for the
 * keys the advisor writes: "key:value" pairs; max_split_size_mb and
 * max_non_split_rounding_mb whole numbers above 20 (the newest releases take
 * 20 too); roundup_power2_divisions a power of two (not 0);
 * garbage_collection_threshold in (0, 1); expandable_segments True or False,
 * exactly. 1 when PyTorch takes line. */
static int torch_accepts(const char *line) {
  char buf[256];
  snprintf(buf, sizeof buf, "%s", line);
  for (char *save, *pair = strtok_r(buf, ",", &save); pair; pair = strtok_r(NULL, ",", &save)) {
    char *value = strchr(pair, ':');
    if (!value || strchr(value + 1, ':'))
      return 0;
    *value++ = '\0';
    char *end;
    unsigned long long u = strtoull(value, &end, 10);
    int whole = *value >= '0' && *value <= '9' && !*end;
    if (!strcmp(pair, "max_split_size_mb")) {
      if (!whole || u <= 20)
        return 0;
    } else if (!strcmp(pair, "max_non_split_rounding_mb")) {
      if (!whole || u <= 20)
        return 0;
    } else if (!strcmp(pair, "roundup_power2_divisions")) {
      if (!whole || u == 0 || (u & (u - 1)))
        return 0;
    } else if (!strcmp(pair, "garbage_collection_threshold")) {
      double d = strtod(value, &end);
      if (*end || !(d > 0 && d < 1))
        return 0;
    } else if (!strcmp(pair, "expandable_segments")) {
      if (strcmp(value, "True") && strcmp(value, "False"))
        return 0;
    } else {
      return 0;
    }
  }
  return 1;
}

/* GPUPOOL_CONF -> the PYTORCH_CUDA_ALLOC_CONF line (NULL: none). */
static const char *const torch_lines[][2] = {
    {"expandable_segments:true", "expandable_segments:True"},
    {"expandable_segments:1", "expandable_segments:True"},
    {"expandable_segments:False", ""},
    {"max_split_size_mb:inf", ""},
    {"max_split_size_mb:unlimited", ""},
    {"max_split_size_mb:100,max_split_size_mb:inf", ""}, /* the last one counts */
    {"max_split_size_mb:inf,max_split_size_mb:100", "max_split_size_mb:100"},
    {"max_split_size_mb :100", "max_split_size_mb:100"},
    {"\tmax_split_size_mb\t:\t0128 ", "max_split_size_mb:128"},
    {"roundup_power2_divisions:0", ""},
    {"roundup_power2_divisions:1", ""},
    {"max_non_split_rounding_mb:0", ""}, /* used only beside a max_split_size_mb */
    {"max_split_size_mb:100,max_non_split_rounding_mb:1", NULL},
    {"max_split_size_mb:100,max_non_split_rounding_mb:20", "max_split_size_mb:100"},
    {"max_split_size_mb:100,max_non_split_rounding_mb:21",
     "max_split_size_mb:100,max_non_split_rounding_mb:21"},
    {" garbage_collection_threshold : .5 ", "garbage_collection_threshold:0.5"},
    {"garbage_collection_threshold:0.00001", "garbage_collection_threshold:0.00001"},
    {"expandable_segments:True,roundup_power2_divisions:4,max_split_size_mb:512,strategy:bfc",
     "max_split_size_mb:512,roundup_power2_divisions:4,expandable_segments:True"},
    {"strategy:round", NULL},
    {"strategy : naive", NULL},
    {"round_linear_cutoff:24", NULL},
    {"reserve_percent:0", NULL},
    {"expandable_segments:True,expandable_slack_percent:5", NULL},
};
#define N_TORCH_LINES (sizeof torch_lines / sizeof torch_lines[0])

static void expect_same_replay(const char *a, const char *b) {
  gpupool_replay_result ra, rb;
  cr_assert_eq(gpupool_replay(hist, a, 80 * 1024 * MiB, &ra), GPUPOOL_OK, "%s",
               gpupool_last_error());
  cr_assert_eq(gpupool_replay(hist, b, 80 * 1024 * MiB, &rb), GPUPOOL_OK, "%s",
               gpupool_last_error());
  cr_expect_eq(ra.peak_reserved, rb.peak_reserved, "'%s' and '%s'", a, b);
  cr_expect_eq(ra.device_allocs, rb.device_allocs, "'%s' and '%s'", a, b);
}

Test(advisor_conf, pytorch_lines_in_pytorchs_spelling) {
  const char *extra[N_TORCH_LINES];
  for (size_t i = 0; i < N_TORCH_LINES; i++)
    extra[i] = torch_lines[i][0];
  gpupool_advice_options o = {.current = "strategy:naive,round_linear_cutoff:20",
                              .extra = extra,
                              .n_extra = N_TORCH_LINES,
                              .no_defaults = 1,
                              .no_capacity = 1,
                              .threads = 1,
                              .max_added_ms = -1};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(hist, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(a->n, N_TORCH_LINES + 1);
  for (size_t i = 0; i < N_TORCH_LINES; i++) {
    const gpupool_advice_candidate *c = &a->c[i + 1];
    const char *want = torch_lines[i][1];
    cr_assert_str_eq(c->conf, torch_lines[i][0]);
    cr_expect_eq(c->has_torch, want != NULL, "'%s': has_torch %d", c->conf, c->has_torch);
    cr_expect_str_eq(c->torch_conf, want ? want : "", "'%s'", c->conf);
    if (c->has_torch) {
      cr_expect(torch_accepts(c->torch_conf), "PyTorch refuses '%s' (of '%s')", c->torch_conf,
                c->conf);
      expect_same_replay(c->conf, c->torch_conf); /* the same settings */
    }
  }
  gpupool_advice_free(a);
}

/* Every line of the default grid is one PyTorch takes. */
Test(advisor_conf, default_grid_lines_are_pytorchs) {
  gpupool_advice_options o = {.no_capacity = 1, .threads = 2, .max_added_ms = -1};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(hist, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  size_t with = 0;
  for (size_t i = 0; i < a->n; i++)
    if (a->c[i].has_torch) {
      with++;
      cr_expect(torch_accepts(a->c[i].torch_conf), "PyTorch refuses '%s'", a->c[i].torch_conf);
    }
  cr_expect_eq(with, 48, "the 48 of bfc, the defaults among them (%zu)", with);
  gpupool_advice_free(a);
}

/* The live pool's line (/advice's current configuration) is read back by the
 * pool's parser as the same settings: decimals without an exponent, never
 * rounded onto a bound. */
Test(advisor_conf, live_line_reads_back) {
  static const char *const confs[] = {
      "garbage_collection_threshold:0.00001",
      "garbage_collection_threshold:0.9999999",
      "garbage_collection_threshold:0.7,reserve_percent:12.5",
      "reserve_percent:0.000001",
      "reserve_percent:49.99999999",
      "expandable_segments:True,expandable_slack_percent:0.0000001",
      "expandable_segments:True,expandable_slack_percent:99.9999999",
      "expandable_segments:True,expandable_slack_percent:33.3",
      "strategy:round,round_linear_cutoff:20,max_split_size_mb:100,max_non_split_rounding_mb:0",
  };
  for (size_t i = 0; i < sizeof confs / sizeof *confs; i++) {
    gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST, .tunables = confs[i], .ignore_env = 1};
    gpupool *p, *q = NULL;
    cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
    char line[256];
    advisor_conf_of_pool(p, line, sizeof line);
    o.tunables = line;
    cr_expect_eq(gpupool_create(&o, &q), GPUPOOL_OK, "'%s' (of '%s'): %s", line, confs[i],
                 gpupool_last_error());
    if (q) {
      const pool_config *a = &p->cfg, *b = &q->cfg;
      cr_expect_eq(a->strategy, b->strategy, "'%s'", line);
      cr_expect_eq(a->max_split_size, b->max_split_size, "'%s'", line);
      cr_expect_eq(a->max_non_split_rounding, b->max_non_split_rounding, "'%s'", line);
      cr_expect_eq(a->gc_threshold, b->gc_threshold, "'%s'", line);
      cr_expect_eq(a->reserve_percent, b->reserve_percent, "'%s'", line);
      cr_expect_eq(a->expandable, b->expandable, "'%s'", line);
      cr_expect_eq(a->expandable_slack, b->expandable_slack, "'%s'", line);
      gpupool_destroy(q);
    }
    gpupool_destroy(p);
  }
}

/* "-0" is 0: the live pool's line says "reserve_percent:0" or leaves the
 * key out, never "-0" (before, the sign of a negative zero was kept and
 * written back). */
Test(advisor_conf, a_negative_zero_is_written_as_zero) {
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST,
                       .tunables = "reserve_percent:-0,expandable_segments:True,"
                                   "expandable_slack_percent:-0.0",
                       .ignore_env = 1};
  gpupool *p;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect(!signbit(p->cfg.reserve_percent) && !signbit(p->cfg.expandable_slack));
  char line[256];
  advisor_conf_of_pool(p, line, sizeof line);
  cr_expect(!strstr(line, "-0"), "'%s'", line);
  gpupool_destroy(p);
}

/* A candidate that adds exactly the bound is within it: its device time is
 * a sum of prices, and the difference of two such sums carries a rounding
 * error (2505 us of calls came out as 2.5050000000000026 ms), which put it
 * over a bound of 2.505 and recommended the current configuration, whose
 * peak is higher. */
Test(advisor_conf, a_candidate_that_adds_exactly_the_bound_is_within_it) {
  const char *src = getenv("GPUPOOL_SOURCE_DIR");
  char trace[512];
  snprintf(trace, sizeof trace, "%s/tests/data/lm_train_24steps.trace", src ? src : ".");
  gpupool_history *lm;
  cr_assert_eq(gpupool_history_load(trace, NULL, NULL, &lm), GPUPOOL_OK, "%s",
               gpupool_last_error());
  const char *extra[] = {"expandable_segments:True,expandable_slack_percent:0"};
  gpupool_advice_options o = {.current = "roundup_power2_divisions:2,expandable_segments:True",
                              .extra = extra,
                              .n_extra = 1,
                              .no_defaults = 1,
                              .no_capacity = 1,
                              .threads = 1,
                              .max_added_ms = 2.505};
  gpupool_advice *a;
  cr_assert_eq(gpupool_advise(lm, &o, &a), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(a->n, 2);
  const gpupool_advice_candidate *c = &a->c[1];
  cr_expect_eq(c->added_ms, 2.505, "added %.17g ms", c->added_ms);
  cr_expect_lt(c->r.peak_reserved, a->c[0].r.peak_reserved);
  cr_expect_eq(a->recommended, 1, "the candidate at the bound was left out");
  char *table = gpupool_advice_render(a, "table");
  cr_assert_not_null(table);
  cr_expect_null(strstr(table, "[over the time bound]"), "%s", table);
  free(table);
  gpupool_advice_free(a);
  gpupool_history_free(lm);
}
