/* oom_dir syncs each file of a report to the disk before renaming it into
 * place (else a crash may leave an empty or short report), and a report
 * whose sync fails is not written; the directory is synced after the
 * renames (else a crash may lose the names). fsync records and fails
 * through helpers/fsync_record.h. */
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
#include "helpers/fsync_record.h"

#define MiB ((size_t)1 << 20)

static char dir[64];

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), k = strlen(suffix);
  return n >= k && !strcmp(s + n - k, suffix);
}

static void setup(void) {
  unsetenv("GPUPOOL_CONF");
  unsetenv("LOCAL_RANK");
  snprintf(dir, sizeof dir, "/tmp/gpupool-oom-fsync-XXXXXX");
  cr_assert_not_null(mkdtemp(dir));
  fsync_record_reset();
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
  for (int i = 0; i < fsync_record_count(); i++)
    if (!strncmp(fsync_record_path(i), dir, strlen(dir)) && ends_with(fsync_record_path(i), suffix))
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
  cr_expect(fsync_record_count() == 3 && !strcmp(fsync_record_path(2), dir),
            "the directory was not synced last (%d)", fsync_record_count());
  gpupool_destroy(p);
}

/* A directory whose sync fails leaves the complete pair in place (the files
 * were synced and renamed), but the report counts as a write error. */
Test(oom_dir_fsync, a_failed_directory_sync_is_a_write_error) {
  gpupool *p = start_with_a_pool();
  cr_redirect_stderr();
  void *big;
  fsync_record_fail_suffix(dir);
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  fsync_record_fail_suffix(NULL);
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
  fsync_record_fail_suffix(".pickle.tmp");
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  fsync_record_fail_suffix(".json.tmp");
  cr_assert_eq(gpupool_malloc(p, &big, 100 * MiB, NULL), GPUPOOL_ERR_OOM);
  fsync_record_fail_suffix(NULL);
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
