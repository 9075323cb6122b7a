/* trace_file: the trace is synced under its temporary name, renamed into
 * place, and then its directory is synced (else a crash may lose the name);
 * a directory whose sync fails is a failed write (-1, the reason in
 * gpupool_last_error()), the complete file left in place. fsync records
 * and fails through helpers/fsync_record.h. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/trace_writer.h"
#include "gpupool/gpupool.h"
#include "helpers/fsync_record.h"

Test(trace_file_fsync, the_file_then_its_directory) {
  char dir[] = "/tmp/gpupool-trace-fsync-XXXXXX", path[128], tmp[160];
  cr_assert_not_null(mkdtemp(dir));
  snprintf(path, sizeof path, "%s/trace.json", dir);
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  cr_assert_eq(trace_write_file(path), 0, "%s", gpupool_last_error());
  cr_assert_eq(fsync_record_count(), 2);
  cr_expect_str_eq(fsync_record_path(0), tmp, "the trace under its temporary name first");
  cr_expect_str_eq(fsync_record_path(1), dir, "then the directory it was renamed in");

  fsync_record_reset();
  fsync_record_fail_suffix(dir);
  cr_redirect_stderr();
  cr_expect_eq(trace_write_file(path), -1);
  cr_expect(strstr(gpupool_last_error(), "trace_file: cannot write") &&
                strstr(gpupool_last_error(), strerror(EIO)),
            "%s", gpupool_last_error());
  cr_expect_eq(access(path, R_OK), 0, "the complete trace stays");
  cr_expect_neq(access(tmp, F_OK), 0, "no temporary file is left");
  unlink(path);
  rmdir(dir);
}
