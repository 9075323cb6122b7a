/* oom_dir syncs each file of a report to the disk before renaming it into
 * place (else a crash may leave an empty or short report), and a report
 * whose sync fails is not written; the directory is synced after the
 * renames (else a crash may lose the names). fsync is wrapped (-Wl,--wrap=fsync, see
 * tests/CMakeLists.txt): it records the name each synced file had, and fails
 * with EIO on demand. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/oom_store.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"

#define MiB        ((size_t)1 << 20)
#define MAX_SYNCED 16

int __real_fsync(int fd);

static char dir[64];
static char synced[MAX_SYNCED][PATH_MAX]; /* the names the synced files had then */
static int nsynced;
static const char *fail_suffix; /* fsync of a file whose name ends so fails */

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

int __wrap_fsync(int fd) {
  char link[64], path[PATH_MAX];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, path, sizeof path - 1);
  path[n > 0 ? n : 0] = '\0';
  if (nsynced < MAX_SYNCED)
    snprintf(synced[nsynced++], sizeof synced[0], "%s", path);
  if (fail_suffix && ends_with(path, fail_suffix)) {
    errno = EIO;
    return -1;
  }
  return __real_fsync(fd);
}

static void setup(void) {
  unsetenv("GPUPOOL_CONF");
  unsetenv("LOCAL_RANK");
  snprintf(dir, sizeof dir, "/tmp/gpupool-oom-fsync-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  nsynced = 0;
  fail_suffix = NULL;
}

static void teardown(void) {
  gpupool_agent_stop();
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  cr_expect_eq(system(cmd), 0);
}

TestSuite(oom_dir_fsync, .init = setup, .fini = teardown);

static gpupool *start_with_a_pool(void) {
  char conf[160];
  snprintf(conf, sizeof conf, "oom_dir:%s", dir);
  setenv("GPUPOOL_AGENT_CONF", conf, 1);
  gpupool_agent_options ao = {.listen = "127.0.0.1:0", .cupti = GPUPOOL_CUPTI_OFF};
  cr_assert_eq(gpupool_agent_start(&ao), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_options o = {
      .name = "fsync", .backend = GPUPOOL_BACKEND_HOST, .host_capacity = 64 * MiB, .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  return p;
}

static int count_files(void) {
  DIR *d = opendir(dir);
  cr_assert_not_null(d, "%s", dir);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

static int was_synced(const char *suffix) {
  for (int i = 0; i < nsynced; i++)
    if (!strncmp(synced[i], dir, strlen(dir)) && ends_with(synced[i], suffix))
      return 1;
  return 0;
}

/* Both files are synced under their temporary names, before the renames. */
Test(oom_dir_fsync, each_file_is_synced_before_its_rename) {
  gpupool *p = start_with_a_pool();
  void *big;
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_eq(c.write_errors, 0);
  cr_expect_eq(count_files(), 2, "the report's JSON and pickle");
  cr_expect(was_synced(".json.tmp"), "the JSON was not synced before its rename");
  cr_expect(was_synced(".pickle.tmp"), "the pickle was not synced before its rename");
  cr_expect(nsynced == 3 && !strcmp(synced[2], dir), "the directory was not synced last (%d)",
            nsynced);
  gpupool_destroy(p);
}

/* A directory whose sync fails leaves the complete pair in place (the files
 * were synced and renamed), but the report counts as a write error. */
Test(oom_dir_fsync, a_failed_directory_sync_is_a_write_error) {
  gpupool *p = start_with_a_pool();
  cr_redirect_stderr();
  void *big;
  fail_suffix = strrchr(dir, '/'); /* the directory's own name */
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  fail_suffix = NULL;
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_eq(c.write_errors, 1);
  cr_expect_eq(count_files(), 2, "the pair stays");
  gpupool_destroy(p);
}

/* A sync that fails (either file's) is a report not written: counted, said
 * once on stderr with the reason, and nothing is left in oom_dir. */
Test(oom_dir_fsync, a_failed_sync_is_a_write_error) {
  gpupool *p = start_with_a_pool();
  cr_redirect_stderr();
  void *big;
  fail_suffix = ".pickle.tmp";
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  fail_suffix = ".json.tmp";
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  fail_suffix = NULL;
  oom_store_counts c;
  oom_store_get_counts(&c);
  cr_expect_eq(c.total, 2);
  cr_expect_eq(c.write_errors, 2);
  cr_expect_eq(count_files(), 0, "a file of a report that was not synced was left");
  fflush(stderr);
  char text[1024] = "";
  size_t n = fread(text, 1, sizeof text - 1, cr_get_redirected_stderr());
  text[n] = '\0';
  const char *line = strstr(text, "cannot write OOM report");
  cr_expect(line && strstr(line, strerror(EIO)), "%s", text);
  cr_expect(line && !strstr(line + 1, "cannot write OOM report"), "more than one line: %s", text);
  gpupool_destroy(p);
}
