/* The configurations the advisor takes: the keys a replay refuses (backend,
 * device, capacity, name, fault injection) are refused in every spelling the
 * pool's parser reads, through gpupool_replay, both kinds of gpupool_advise
 * candidate and gpupool-advise --conf. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpupool/advisor.h"

#define MiB ((uint64_t)1 << 20)

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
 * on the host backend, a real device, or with faults. */
static const char *const refused[][2] = {
    {"backend", "host"},   {"device", "0"},        {"name", "x"},       {"host_capacity_mb", "1"},
    {"fault_rate", "0.5"}, {"fault_every_n", "2"}, {"fault_seed", "3"},
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

/* Runs gpupool-advise with args (NULL-terminated after the program name);
 * its exit status, and its standard error in err. */
static int run_advise(char *err, size_t errlen, const char *const *args) {
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
    int null = open("/dev/null", O_WRONLY);
    dup2(null, 1);
    dup2(fds[1], 2);
    close(fds[0]);
    execv(prog, (char *const *)args);
    _exit(127);
  }
  close(fds[1]);
  size_t n = 0;
  ssize_t got;
  while (n + 1 < errlen && (got = read(fds[0], err + n, errlen - 1 - n)) > 0)
    n += (size_t)got;
  err[n] = '\0';
  close(fds[0]);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status));
  return WEXITSTATUS(status);
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
