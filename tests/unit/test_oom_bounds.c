/* The OOM flight recorder's bounds and oom_dir's names, through the
 * internal interfaces: a message longer than gpupool_last_error()'s buffer
 * is cut between clauses and keeps its link; a report never replaces a file
 * of oom_dir (an earlier run's report of the same pid, time and id, as in a
 * container restarted, or a link planted at its temporary name); both files
 * of a report or neither, also where link(2) fails or the file system has
 * no hard links; oom_dir keeps the last reports of an agent; a copy
 * bounds the runs of mapped pages it holds. link(2) is this file's own
 * (below), which calls the system's unless a test makes it fail. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agent/oom_store.h"
#include "gpupool/host.h"
#include "helpers/pool_check.h"
#include "pool/oom_report.h"
#include "pool/pool_capture.h"
#include "pool/pool_view.h"

#define MiB PC_MiB

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

/* link(2), failing with link_errno for targets ending in link_suffix (any
 * target where NULL) while link_errno is set. */
static int link_errno;
static const char *link_suffix;

int link(const char *from, const char *to) {
  if (link_errno && (!link_suffix || ends_with(to, link_suffix))) {
    errno = link_errno;
    return -1;
  }
  return (int)syscall(SYS_linkat, AT_FDCWD, from, AT_FDCWD, to, 0);
}

static char dir[64];

static void setup(void) {
  unsetenv("GPUPOOL_CONF");
  snprintf(dir, sizeof dir, "/tmp/gpupool-oom-bounds-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  link_errno = 0;
  link_suffix = NULL;
}

static pool_oom_report *last;

static void teardown(void) {
  pool_oom_set_observer(NULL);
  oom_store_stop();
  pool_oom_report_free(last);
  last = NULL;
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(oom_bounds, .init = setup, .fini = teardown);

static void keep(pool_oom_report *r, void *arg) {
  (void)arg;
  pool_oom_report_free(last);
  last = r;
}

/* A report of a real OOM, kept by the test. */
static pool_oom_report *a_report(void) {
  pool_events_enable(1024);
  pool_oom_observer o = {NULL, keep, NULL};
  pool_oom_set_observer(&o);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * MiB, NULL);
  void *a = pc_must_malloc(p, 3 * MiB, NULL), *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  pc_must_free(p, a);
  gpupool_destroy(p);
  pool_oom_set_observer(NULL);
  cr_assert_not_null(last);
  return last;
}

static int count_files(const char *suffix) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.' && ends_with(e->d_name, suffix);
  closedir(d);
  return n;
}

static void put(const char *name, const char *text) {
  char path[sizeof dir + 256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f, "%s", path);
  fputs(text, f);
  cr_assert_eq(fclose(f), 0);
}

/* The text of dir/name ("" when there is none). */
static const char *text_of(const char *name) {
  static char text[256];
  char path[sizeof dir + 256];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  text[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f) {
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    fclose(f);
  }
  return text;
}

static int exists(const char *fmt, const char *base) {
  char name[200], path[300];
  snprintf(name, sizeof name, fmt, base);
  snprintf(path, sizeof path, "%s/%s", dir, name);
  struct stat st;
  return lstat(path, &st) == 0;
}

/* The name is gpupool-oom-<UTC time>-<pid>-<id>: the time keeps the names
 * of a restarted program apart (its pid and ids can repeat: PID 1 in a
 * container), and they sort by time. */
Test(oom_bounds, names_carry_the_time_the_pid_and_the_id) {
  pool_oom_report *r = a_report();
  char base[OOM_STORE_NAME_MAX], want[OOM_STORE_NAME_MAX];
  oom_store_file_base(r, base, sizeof base);
  time_t sec = (time_t)(r->time_ns / 1000000000u);
  struct tm tm;
  gmtime_r(&sec, &tm);
  char when[32];
  strftime(when, sizeof when, "%Y%m%dT%H%M%S", &tm);
  snprintf(want, sizeof want, "gpupool-oom-%s.%06uZ-%ld-%llu", when,
           (unsigned)(r->time_ns % 1000000000u / 1000u), (long)getpid(), (unsigned long long)r->id);
  cr_expect_str_eq(base, want);
  char name[OOM_STORE_NAME_MAX + 16];
  cr_assert_eq(oom_store_write(r, dir, name, sizeof name), 0);
  cr_expect_str_eq(name, base);
  cr_expect(exists("%s.json", base) && exists("%s.pickle", base));
  cr_expect_eq(count_files(".tmp"), 0);
}

/* The same name again (a restarted program with the same pid, ids and
 * time, or the same report written twice): the first pair stays as it was,
 * and the second takes the next free name, both of its files under it. */
Test(oom_bounds, a_taken_name_is_never_replaced) {
  pool_oom_report *r = a_report();
  char base[OOM_STORE_NAME_MAX], name[OOM_STORE_NAME_MAX + 16], file[200];
  oom_store_file_base(r, base, sizeof base);
  cr_assert_eq(oom_store_write(r, dir, name, sizeof name), 0);
  snprintf(file, sizeof file, "%s.json", base);
  char first[256];
  snprintf(first, sizeof first, "%s", text_of(file));
  /* an earlier crash's pickle at -2, alone */
  snprintf(file, sizeof file, "%s-2.pickle", base);
  put(file, "an earlier report");
  cr_assert_eq(oom_store_write(r, dir, name, sizeof name), 0);
  char want[OOM_STORE_NAME_MAX + 16];
  snprintf(want, sizeof want, "%s-3", base);
  cr_expect_str_eq(name, want, "the next name both files are free at");
  cr_expect_str_eq(text_of(file), "an earlier report");
  snprintf(file, sizeof file, "%s.json", base);
  cr_expect_str_eq(text_of(file), first, "the first report was replaced");
  cr_expect(!exists("%s-2.json", base), "a JSON without its pickle");
  cr_expect(exists("%s-3.json", base) && exists("%s-3.pickle", base));
  /* a JSON alone at -4: the pickle put there first is taken back */
  snprintf(file, sizeof file, "%s-4.json", base);
  put(file, "another earlier report");
  cr_assert_eq(oom_store_write(r, dir, name, sizeof name), 0);
  snprintf(want, sizeof want, "%s-5", base);
  cr_expect_str_eq(name, want);
  cr_expect_str_eq(text_of(file), "another earlier report");
  cr_expect(!exists("%s-4.pickle", base), "the pickle of a report whose JSON did not go in");
  cr_expect_eq(count_files(".json"), 4);
  cr_expect_eq(count_files(".pickle"), 4);
  cr_expect_eq(count_files(".tmp"), 0);
}

/* A link planted at the temporary name (a shared oom_dir): the report is
 * not written through it, and the link stays. */
Test(oom_bounds, a_link_at_the_temporary_name_is_not_written_through) {
  pool_oom_report *r = a_report();
  char base[OOM_STORE_NAME_MAX], path[256], victim[128], name[OOM_STORE_NAME_MAX + 16];
  oom_store_file_base(r, base, sizeof base);
  snprintf(victim, sizeof victim, "%s/victim", dir);
  put("victim", "precious");
  snprintf(path, sizeof path, "%s/%s.json.tmp", dir, base);
  cr_assert_eq(symlink(victim, path), 0);
  snprintf(path, sizeof path, "%s/%s.pickle.tmp", dir, base);
  cr_assert_eq(symlink("/nonexistent/dangling", path), 0);
  cr_assert_eq(oom_store_write(r, dir, name, sizeof name), 0);
  cr_expect_str_eq(text_of("victim"), "precious");
  cr_expect_str_eq(name, base);
  cr_expect(exists("%s.json", base) && exists("%s.pickle", base));
  struct stat st;
  cr_expect(lstat(path, &st) == 0 && S_ISLNK(st.st_mode), "the planted link stays");
  cr_expect_eq(count_files(".tmp"), 2, "only the planted links");
}

/* Both files or neither: a JSON that cannot be linked into place takes its
 * pickle back, and no temporary file stays. */
Test(oom_bounds, a_json_that_cannot_go_in_takes_its_pickle_back) {
  pool_oom_report *r = a_report();
  link_errno = EIO;
  link_suffix = ".json";
  cr_expect_eq(oom_store_write(r, dir, NULL, 0), EIO);
  link_errno = 0;
  cr_expect_eq(count_files(".json"), 0);
  cr_expect_eq(count_files(".pickle"), 0);
  cr_expect_eq(count_files(".tmp"), 0);
}

/* A file system without hard links (link(2): EPERM): renameat2 with
 * RENAME_NOREPLACE puts the pair in place, never over an earlier one; a
 * JSON that cannot go in moves its pickle back (and it goes). */
Test(oom_bounds, without_hard_links_the_pair_is_moved_in_without_replacing) {
  pool_oom_report *r = a_report();
  char base[OOM_STORE_NAME_MAX], name[OOM_STORE_NAME_MAX + 16], file[200], want[200];
  oom_store_file_base(r, base, sizeof base);
  snprintf(file, sizeof file, "%s.json", base);
  put(file, "an earlier report");
  link_errno = EPERM;
  cr_assert_eq(oom_store_write(r, dir, name, sizeof name), 0);
  snprintf(want, sizeof want, "%s-2", base);
  cr_expect_str_eq(name, want);
  cr_expect_str_eq(text_of(file), "an earlier report");
  cr_expect(exists("%s-2.json", base) && exists("%s-2.pickle", base));
  cr_expect(!exists("%s.pickle", base));
  cr_expect_eq(count_files(".tmp"), 0);
  link_errno = 0;
}

/* oom_dir keeps an agent's last dir_max reports: one more removes the
 * oldest pair it wrote, and nothing else. */
Test(oom_bounds, oom_dir_keeps_the_last_reports_of_an_agent) {
  put("gpupool-oom-20000101T000000.000000Z-1-1.json", "another process's");
  oom_store_start(2, dir, 3);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * MiB, NULL);
  for (int i = 0; i < 5; i++) {
    void *x = NULL;
    cr_assert_eq(gpupool_malloc(p, &x, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  }
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_eq(c.total, 5);
  cr_expect_eq(c.write_errors, 0);
  cr_expect_eq(count_files(".json"), 3 + 1, "the last 3, and the other process's");
  cr_expect_eq(count_files(".pickle"), 3);
  cr_expect_str_eq(text_of("gpupool-oom-20000101T000000.000000Z-1-1.json"), "another process's");
  /* the ones kept are the newest: the highest ids */
  DIR *d = opendir(dir);
  uint64_t lowest = UINT64_MAX, highest = 0;
  char pid[32];
  snprintf(pid, sizeof pid, "-%ld-", (long)getpid());
  for (struct dirent *e; (e = readdir(d));) {
    const char *at = strstr(e->d_name, pid);
    if (!at || !ends_with(e->d_name, ".json"))
      continue;
    uint64_t id = strtoull(at + strlen(pid), NULL, 10);
    lowest = id < lowest ? id : lowest;
    highest = id > highest ? id : highest;
  }
  closedir(d);
  cr_expect_eq(highest - lowest, 2, "three consecutive reports");
  oom_store_stop();
  gpupool_destroy(p);
}

/* A copy holds at most max_runs runs of mapped pages, whole segments only. */
Test(oom_bounds, runs_of_mapped_pages_are_bounded) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 64 * MiB, "expandable_segments:True");
  void *a = pc_must_malloc(p, 3 * MiB, NULL);
  pool_capture_limits lim = {.max_segments = SIZE_MAX, .max_blocks = SIZE_MAX, .max_runs = 0};
  pool_capture c;
  cr_assert_eq(pool_capture_take_limited(p, 0, &lim, &c), 0);
  cr_expect(c.truncated);
  cr_expect_eq(c.nsegs, 0);
  cr_expect_eq(c.nblocks, 0);
  cr_expect_eq(c.nruns, 0);
  cr_expect_eq(c.t.segments, 1, "the totals count it");
  pool_capture_free(&c);
  lim.max_runs = 1;
  cr_assert_eq(pool_capture_take_limited(p, 0, &lim, &c), 0);
  cr_expect_not(c.truncated);
  cr_expect_eq(c.nsegs, 1);
  cr_expect_eq(c.nruns, 1);
  pool_capture_free(&c);
  pc_must_free(p, a);
  gpupool_destroy(p);
}
