/* gpupool_torch_malloc/free (torch/torch_allocator.c) on the host backend:
 * GPUPOOL_CONF, applied after the cuda default, moves the pools there. Each
 * Criterion test runs in its own process, so each starts with no pools. */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpupool/torch.h"
#include "gpupool/agent.h"
#include "gpupool/host.h"
#include "helpers/child_output.h"

static void host_pools(void) {
  setenv("GPUPOOL_CONF", "backend:host,host_capacity_mb:64", 1);
  unsetenv("GPUPOOL_AGENT_CONF");
  unsetenv("GPUPOOL_RECORD");
}

static gpupool_stats stats_of(int device) {
  gpupool_stats s;
  memset(&s, 0, sizeof s);
  cr_assert_eq(gpupool_get_stats(gpupool_torch_pool(device), &s), GPUPOOL_OK);
  return s;
}

Test(torch_allocator, first_malloc_creates_the_torch_pool, .init = host_pools) {
  cr_assert_null(gpupool_torch_pool(0));
  char *p = gpupool_torch_malloc(1000, 0, NULL);
  cr_assert_not_null(p);
  memset(p, 0xab, 1000); /* real, writable memory */
  gpupool *pool = gpupool_torch_pool(0);
  cr_assert_not_null(pool);
  cr_assert_str_eq(gpupool_name(pool), "torch");
  cr_assert_str_eq(gpupool_backend_name(pool), "host");
  cr_assert_eq(stats_of(0).allocation[GPUPOOL_STAT_ALL].current, 1);
  cr_assert_eq(stats_of(0).requested_bytes[GPUPOOL_STAT_ALL].current, 1000);
  gpupool_torch_free(p, 1000, 0, NULL);
  cr_assert_eq(stats_of(0).allocation[GPUPOOL_STAT_ALL].current, 0);
  cr_assert_eq(gpupool_torch_pool(0), pool, "the pool outlives its allocations");
}

Test(torch_allocator, size_zero_is_null_without_a_pool, .init = host_pools) {
  cr_assert_null(gpupool_torch_malloc(0, 0, NULL));
  cr_assert_null(gpupool_torch_pool(0));
  gpupool_torch_free(NULL, 0, 0, NULL); /* a no-op, like free(NULL) */
}

Test(torch_allocator, out_of_memory_is_null_and_the_pool_goes_on, .init = host_pools) {
  void *small = gpupool_torch_malloc(4096, 0, NULL);
  cr_assert_not_null(small);
  cr_assert_null(gpupool_torch_malloc((size_t)128 << 20, 0, NULL), "128 MiB on a 64 MiB device");
  gpupool_stats s = stats_of(0);
  cr_assert_eq(s.num_ooms, 1);
  cr_assert_eq(s.allocation[GPUPOOL_STAT_ALL].current, 1, "the live allocation is untouched");
  void *again = gpupool_torch_malloc((size_t)1 << 20, 0, NULL);
  cr_assert_not_null(again);
  gpupool_torch_free(again, (size_t)1 << 20, 0, NULL);
  gpupool_torch_free(small, 4096, 0, NULL);
  cr_assert_eq(stats_of(0).allocation[GPUPOOL_STAT_ALL].current, 0);
}

Test(torch_allocator, devices_out_of_range_get_null, .init = host_pools) {
  cr_assert_null(gpupool_torch_malloc(16, -1, NULL));
  cr_assert_null(gpupool_torch_malloc(16, 64, NULL));
  cr_assert_null(gpupool_torch_pool(-1));
  cr_assert_null(gpupool_torch_pool(64));
}

Test(torch_allocator, one_pool_per_device, .init = host_pools) {
  void *a = gpupool_torch_malloc(512, 0, NULL);
  void *b = gpupool_torch_malloc(512, 1, NULL);
  cr_assert(a && b);
  cr_assert_neq(gpupool_torch_pool(0), gpupool_torch_pool(1));
  cr_assert_eq(gpupool_device(gpupool_torch_pool(0)), 0);
  cr_assert_eq(gpupool_device(gpupool_torch_pool(1)), 1);
  cr_assert_eq(stats_of(0).allocation[GPUPOOL_STAT_ALL].current, 1);
  cr_assert_eq(stats_of(1).allocation[GPUPOOL_STAT_ALL].current, 1);
  gpupool_torch_free(a, 512, 0, NULL);
  gpupool_torch_free(b, 512, 1, NULL);
}

Test(torch_allocator, streams_are_passed_to_the_pool, .init = host_pools) {
  gpupool_host_stream *s = gpupool_host_stream_create();
  void *a = gpupool_torch_malloc(4096, 0, s);
  cr_assert_not_null(a);
  gpupool_torch_free(a, 4096, 0, s);
  /* Reused at once on its own stream: a cache hit, no new segment. */
  uint64_t device_allocs = stats_of(0).num_device_alloc;
  void *b = gpupool_torch_malloc(4096, 0, s);
  cr_assert_eq(b, a);
  cr_assert_eq(stats_of(0).num_device_alloc, device_allocs);
  gpupool_torch_free(b, 4096, 0, s);
  gpupool_host_stream_destroy(s);
}

Test(torch_allocator, foreign_free_changes_nothing, .init = host_pools) {
  void *a = gpupool_torch_malloc(4096, 0, NULL);
  cr_assert_not_null(a);
  int local;
  gpupool_torch_free(&local, sizeof local, 0, NULL); /* never from the pool */
  gpupool_torch_free(a, 4096, 1, NULL);              /* device 1 has no pool */
  cr_assert_eq(stats_of(0).allocation[GPUPOOL_STAT_ALL].current, 1);
  gpupool_torch_free(a, 4096, 0, NULL);
  cr_assert_eq(stats_of(0).allocation[GPUPOOL_STAT_ALL].current, 0);
}

Test(torch_allocator, bad_conf_gives_null_not_a_crash) {
  setenv("GPUPOOL_CONF", "backend:host,strategy:bogus", 1);
  unsetenv("GPUPOOL_AGENT_CONF");
  cr_assert_null(gpupool_torch_malloc(512, 0, NULL));
  cr_assert_null(gpupool_torch_malloc(512, 0, NULL), "still refused, and quietly");
  cr_assert_null(gpupool_torch_pool(0));
}

/* GPUPOOL_CONF=device:1 would put device 0's pool on GPU 1: the first
 * allocation is refused with the reason, and no pool is created. */
Test(torch_allocator, a_device_key_is_refused_at_the_first_allocation) {
  setenv("GPUPOOL_CONF", "backend:host,host_capacity_mb:64,device:1", 1);
  unsetenv("GPUPOOL_AGENT_CONF");
  cr_assert_null(gpupool_torch_malloc(512, 0, NULL));
  cr_expect(strstr(gpupool_last_error(), "GPUPOOL_CONF: device: "), "%s", gpupool_last_error());
  cr_assert_null(gpupool_torch_pool(0));
}

Test(torch_allocator, agent_starts_from_its_conf, .init = host_pools) {
  setenv("GPUPOOL_AGENT_CONF", "listen:127.0.0.1:0,cupti:off", 1);
  cr_assert_eq(gpupool_agent_port(), 0);
  void *a = gpupool_torch_malloc(512, 0, NULL);
  cr_assert_not_null(a);
  cr_assert_gt(gpupool_agent_port(), 0, "the agent serves once the first pool exists");
  gpupool_torch_free(a, 512, 0, NULL);
  gpupool_agent_stop();
}

Test(torch_allocator, a_failing_agent_does_not_stop_allocations, .init = host_pools) {
  setenv("GPUPOOL_AGENT_CONF", "listen:not-an-address,cupti:off", 1);
  void *a = gpupool_torch_malloc(512, 0, NULL);
  cr_assert_not_null(a);
  cr_assert_eq(gpupool_agent_port(), 0);
  gpupool_torch_free(a, 512, 0, NULL);
}

/* A child with GPUPOOL_RECORD=path makes pairs allocations and frees, then
 * exits (status 0 expected); its standard error in err. */
static void record_child(const char *path, int pairs, char *err, size_t errlen) {
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    close(fds[0]);
    setenv("GPUPOOL_RECORD", path, 1);
    for (int i = 0; i < pairs; i++) {
      void *p = gpupool_torch_malloc(1000, 0, NULL);
      if (!p)
        _exit(1);
      gpupool_torch_free(p, 1000, 0, NULL);
    }
    exit(0);
  }
  close(fds[1]);
  int status = child_output(pid, fds[0], err, errlen);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, err);
}

/* A forked child (a DataLoader worker) dropping its parent's tensors: each
 * free (and record_stream) is refused, and stderr says so once, not once a
 * tensor; allocating in the child is refused with the reason; the parent
 * goes on. */
Test(torch_allocator, a_forked_child_frees_the_parents_memory_quietly, .init = host_pools) {
  void *a = gpupool_torch_malloc(1000, 0, NULL), *b = gpupool_torch_malloc(4 << 20, 0, NULL);
  cr_assert(a && b);
  int fds[2];
  cr_assert_eq(pipe(fds), 0);
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    alarm(10);
    dup2(fds[1], 2);
    close(fds[0]);
    gpupool_torch_free(a, 1000, 0, NULL);
    gpupool_torch_free(b, 4 << 20, 0, NULL);
    gpupool_torch_free(a, 1000, 0, NULL);
    gpupool_torch_record_stream(a, NULL);
    gpupool_torch_record_stream(b, NULL);
    _exit(0);
  }
  close(fds[1]);
  char err[4096];
  int status = child_output(pid, fds[0], err, sizeof err);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "status %d: %s", status, err);
  /* one line for the three frees, one for the two record_streams */
  const char *want = "was created before this process was forked";
  const char *line = strstr(err, "gpupool_torch: free of ");
  cr_expect(line && strstr(line, want) && strstr(line, "said once"), "%s", err);
  cr_expect(line && !strstr(line + 1, "gpupool_torch: free of "), "more than one line: %s", err);
  const char *rs = strstr(err, "gpupool_torch: record_stream of ");
  cr_expect(rs && strstr(rs, want) && strstr(rs, "said once"), "%s", err);
  cr_expect(rs && !strstr(rs + 1, "gpupool_torch: record_stream of "),
            "more than one record_stream line: %s", err);
  gpupool_stats s = stats_of(0);
  cr_expect_eq(s.allocation[GPUPOOL_STAT_ALL].current, 2, "the parent's allocations are live");
  gpupool_torch_free(a, 1000, 0, NULL);
  gpupool_torch_free(b, 4 << 20, 0, NULL);
  s = stats_of(0);
  cr_expect_eq(s.allocation[GPUPOOL_STAT_ALL].current, 0);
}

/* GPUPOOL_RECORD on a full disk: the program runs on, and stderr says,
 * once, that the record is incomplete and why. 4 lines fail only at
 * exit's flush; 80000 lines (over the 1 MiB buffer) fail while it runs. */
Test(torch_allocator, record_on_a_full_disk_says_so_once, .init = host_pools) {
  const int pairs[] = {2, 40000};
  for (size_t i = 0; i < 2; i++) {
    char err[4096];
    record_child("/dev/full", pairs[i], err, sizeof err);
    const char *want = "gpupool_torch: GPUPOOL_RECORD=/dev/full: write failed: ";
    const char *line = strstr(err, want);
    cr_expect(line && strstr(err, strerror(ENOSPC)), "%d pairs: %s", pairs[i], err);
    cr_expect(line && !strstr(line + 1, want), "%d pairs, more than one line: %s", pairs[i], err);
  }
}

/* GPUPOOL_RECORD that cannot be opened: the reason, and no recording. */
Test(torch_allocator, record_that_cannot_be_opened_says_why, .init = host_pools) {
  char err[4096];
  record_child("/nonexistent/dir/record", 1, err, sizeof err);
  cr_expect(strstr(err, "GPUPOOL_RECORD=/nonexistent/dir/record: cannot open the file: ") &&
                strstr(err, strerror(ENOENT)),
            "%s", err);
}

/* Forks a child that records into a new file (path, "/tmp/...XXXXXX"
 * filled in): 0 in the child, which has GPUPOOL_RECORD set and must exit. */
static pid_t fork_recording(char *path) {
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0)
    setenv("GPUPOOL_RECORD", path, 1);
  return pid;
}

/* Waits for the recording child, which must exit 0 (exit flushes the file),
 * then reads the file's lines into line (at most max; max + 1 read means
 * there were more) and removes it; returns how many. */
static int recorded_lines(pid_t pid, const char *path, char (*line)[128], int max) {
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  int n = 0;
  while (n <= max && fgets(line[n], sizeof line[n], f))
    n++;
  fclose(f);
  unlink(path);
  return n;
}

/* GPUPOOL_RECORD: the child allocates and exits (exit flushes the file); the
 * parent reads what it wrote: the allocations, record_streams and frees the
 * pool took, and nothing of the calls it refused. */
Test(torch_allocator, record_writes_the_trace, .init = host_pools) {
  char path[] = "/tmp/gpupool_torch_record_XXXXXX";
  pid_t pid = fork_recording(path);
  if (pid == 0) {
    gpupool_host_stream *s = gpupool_host_stream_create();
    void *a = gpupool_torch_malloc(1000, 0, s);
    void *b = gpupool_torch_malloc(2048, 0, NULL);
    gpupool_torch_malloc(0, 0, NULL); /* not recorded */
    gpupool_torch_record_stream(b, s);
    gpupool_torch_free(a, 1000, 0, s);
    gpupool_torch_free(b, 2048, 0, NULL);
    /* refused frees (a double free, a foreign pointer) write no line: a
     * replay must not end an allocation of that address with them */
    gpupool_torch_free(a, 1000, 0, s);
    static char foreign[64];
    gpupool_torch_free(foreign, sizeof foreign, 0, NULL);
    gpupool_torch_record_stream(foreign, s);
    exit(a && b ? 0 : 1);
  }
  char line[6][128];
  cr_assert_eq(recorded_lines(pid, path, line, 5), 5, "exactly five lines");
  uintptr_t a, b, fa, fb, sa, sb, rb, rs;
  size_t za, zb;
  cr_assert_eq(sscanf(line[0], "a 0x%" SCNxPTR " %zu 0x%" SCNxPTR, &a, &za, &sa), 3, "%s", line[0]);
  cr_assert_eq(sscanf(line[1], "a 0x%" SCNxPTR " %zu 0x%" SCNxPTR, &b, &zb, &sb), 3, "%s", line[1]);
  cr_assert_eq(sscanf(line[2], "r 0x%" SCNxPTR " 0x%" SCNxPTR, &rb, &rs), 2, "%s", line[2]);
  cr_assert_eq(sscanf(line[3], "f 0x%" SCNxPTR, &fa), 1, "%s", line[3]);
  cr_assert_eq(sscanf(line[4], "f 0x%" SCNxPTR, &fb), 1, "%s", line[4]);
  cr_assert_eq(rb, b);
  cr_assert_eq(rs, sa, "b used on a's stream");
  cr_assert_eq(za, 1000);
  cr_assert_eq(zb, 2048);
  cr_assert_neq(sa, 0, "the simulated stream's handle");
  cr_assert_eq(sb, 0, "the default stream");
  cr_assert_neq(a, b);
  cr_assert_eq(fa, a);
  cr_assert_eq(fb, b);
}

/* GPUPOOL_RECORD in a process with two devices: one file, whose allocation
 * lines of device 1 name it after the stream (device 0's have no fifth
 * field, as a single-device run's always had). */
Test(torch_allocator, record_names_the_device_where_not_0, .init = host_pools) {
  char path[] = "/tmp/gpupool_torch_record_XXXXXX";
  pid_t pid = fork_recording(path);
  if (pid == 0) {
    void *a = gpupool_torch_malloc(1000, 0, NULL);
    void *b = gpupool_torch_malloc(3000, 1, NULL);
    gpupool_torch_free(b, 3000, 1, NULL);
    gpupool_torch_free(a, 1000, 0, NULL);
    exit(a && b ? 0 : 1);
  }
  char line[5][128];
  cr_assert_eq(recorded_lines(pid, path, line, 4), 4, "exactly four lines");
  uintptr_t a, b, sa, sb;
  size_t za, zb;
  int device, end = 0;
  cr_assert_eq(sscanf(line[0], "a 0x%" SCNxPTR " %zu 0x%" SCNxPTR "\n%n", &a, &za, &sa, &end), 3,
               "%s", line[0]);
  cr_expect_eq((size_t)end, strlen(line[0]), "device 0 has no fifth field: %s", line[0]);
  cr_assert_eq(sscanf(line[1], "a 0x%" SCNxPTR " %zu 0x%" SCNxPTR " %d", &b, &zb, &sb, &device), 4,
               "%s", line[1]);
  cr_expect_eq(device, 1);
  cr_expect_eq(za, 1000);
  cr_expect_eq(zb, 3000);
}

/* tensor.record_stream(b), as PyTorch passes it: the block's reuse after the
 * free waits for b's work, on the pool of whichever device holds it. */
Test(torch_allocator, record_stream_defers_reuse_until_the_stream_completes, .init = host_pools) {
  gpupool_host_stream *a = gpupool_host_stream_create(), *b = gpupool_host_stream_create();
  cr_assert_not_null(gpupool_torch_malloc(512, 0, a)); /* device 0 has a pool too */
  void *x = gpupool_torch_malloc(4096, 2, a);
  cr_assert_not_null(x);
  gpupool_torch_record_stream(x, b);
  gpupool_host_stream_enqueue(b); /* x is in use by work queued on b */
  gpupool_torch_free(x, 4096, 2, a);
  cr_expect_eq(stats_of(2).pending_free_blocks, 1);
  void *y = gpupool_torch_malloc(4096, 2, a);
  cr_expect_neq(y, x, "b's work is pending");
  gpupool_host_stream_complete(b);
  void *z = gpupool_torch_malloc(4096, 2, a);
  cr_expect_eq(z, x, "b's work is done");
  cr_expect_eq(stats_of(2).pending_free_blocks, 0);
  cr_expect_eq(stats_of(0).pending_free_blocks, 0);
}

/* Sends stderr into a file until stderr_end, which reads what came into
 * out (NUL-terminated). */
static FILE *stderr_file;
static int stderr_saved = -1;

static void stderr_begin(void) {
  stderr_file = tmpfile();
  cr_assert_not_null(stderr_file);
  fflush(stderr);
  stderr_saved = dup(2);
  cr_assert_geq(stderr_saved, 0);
  cr_assert_eq(dup2(fileno(stderr_file), 2), 2);
}

static void stderr_end(char *out, size_t cap) {
  fflush(stderr);
  dup2(stderr_saved, 2);
  close(stderr_saved);
  rewind(stderr_file);
  size_t n = fread(out, 1, cap - 1, stderr_file);
  out[n] = '\0';
  fclose(stderr_file);
}

/* A pointer no pool holds (a foreign one, or one freed already): one line
 * on stderr (caught in a file for the call), and nothing changes. */
Test(torch_allocator, record_stream_of_a_foreign_pointer_says_so, .init = host_pools) {
  void *x = gpupool_torch_malloc(4096, 0, NULL);
  cr_assert_not_null(x);
  stderr_begin();
  int local;
  gpupool_torch_record_stream(&local, NULL);
  gpupool_torch_record_stream(NULL, NULL); /* PyTorch's empty tensors: nothing */
  char err[4096] = "";
  stderr_end(err, sizeof err);
  cr_expect(strstr(err, "gpupool_torch: record_stream of ") &&
                strstr(err, "no pool holds it (1 asked)"),
            "%s", err);
  cr_expect_eq(strchr(err, '\n'), strrchr(err, '\n'), "one line: %s", err);
  gpupool_torch_free(x, 4096, 0, NULL);
  cr_expect_eq(stats_of(0).allocation[GPUPOOL_STAT_ALL].current, 0);
}

/* set_per_process_memory_fraction before a device's first allocation: its
 * pool is created with it (64 MiB device, 0.5: 32 MiB), the others not. */
Test(torch_allocator, memory_fraction_given_before_the_pool_caps_it, .init = host_pools) {
  gpupool_torch_set_memory_fraction(0.5, 1);
  cr_expect_eq(gpupool_torch_memory_fraction(1), 0.5);
  cr_expect_eq(gpupool_torch_memory_fraction(0), 1.0, "another device has none");
  void *a = gpupool_torch_malloc(20 << 20, 1, NULL);
  cr_assert_not_null(a);
  cr_expect_eq(gpupool_memory_fraction(gpupool_torch_pool(1)), 0.5);
  stderr_begin();
  void *b = gpupool_torch_malloc(20 << 20, 1, NULL); /* 40 MiB > 32 */
  char err[4096] = "";
  stderr_end(err, sizeof err);
  cr_expect_null(b);
  cr_expect(strstr(err, "CUDA out of memory.") && strstr(err, "memory_fraction 0.5"), "%s", err);
  void *c = gpupool_torch_malloc(20 << 20, 0, NULL), *d = gpupool_torch_malloc(20 << 20, 0, NULL);
  cr_expect(c && d, "device 0 has the whole 64 MiB");
  gpupool_torch_set_memory_fraction(1.0, 1); /* on the pool now */
  b = gpupool_torch_malloc(20 << 20, 1, NULL);
  cr_expect_not_null(b);
  cr_expect_eq(gpupool_torch_memory_fraction(1), 1.0);
  gpupool_torch_free(a, 20 << 20, 1, NULL);
  gpupool_torch_free(b, 20 << 20, 1, NULL);
  gpupool_torch_free(c, 20 << 20, 0, NULL);
  gpupool_torch_free(d, 20 << 20, 0, NULL);
}

Test(torch_allocator, a_bad_memory_fraction_says_so_and_changes_nothing, .init = host_pools) {
  gpupool_torch_set_memory_fraction(0.25, 0);
  stderr_begin();
  gpupool_torch_set_memory_fraction(1.5, 0);
  gpupool_torch_set_memory_fraction(NAN, 0);
  gpupool_torch_set_memory_fraction(0.5, -1);
  gpupool_torch_set_memory_fraction(0.5, 64);
  char err[4096] = "";
  stderr_end(err, sizeof err);
  cr_expect(strstr(err, "set_per_process_memory_fraction(1.5, device 0): not a fraction"), "%s",
            err);
  cr_expect(strstr(err, "(nan, device 0): not a fraction"), "%s", err);
  cr_expect(strstr(err, "(0.5, device -1): no such device"), "%s", err);
  cr_expect(strstr(err, "(0.5, device 64): no such device"), "%s", err);
  cr_expect_eq(gpupool_torch_memory_fraction(0), 0.25, "unchanged");
  cr_expect(isnan(gpupool_torch_memory_fraction(-1)));
  cr_expect(isnan(gpupool_torch_memory_fraction(64)));
  void *a = gpupool_torch_malloc(4096, 0, NULL);
  cr_assert_not_null(a);
  cr_expect_eq(gpupool_memory_fraction(gpupool_torch_pool(0)), 0.25);
  gpupool_torch_free(a, 4096, 0, NULL);
}

/* PyTorch's own torch.cuda.empty_cache() path (set_reset_fn): every pool. */
Test(torch_allocator, empty_cache_returns_every_pools_cache, .init = host_pools) {
  gpupool_torch_empty_cache(); /* no pool yet: nothing to do */
  for (int device = 0; device < 3; device += 2)
    gpupool_torch_free(gpupool_torch_malloc(8 << 20, device, NULL), 8 << 20, device, NULL);
  /* bfc: a 20 MiB segment for a block of 1 to 10 MiB */
  cr_expect_eq(stats_of(0).reserved_bytes[GPUPOOL_STAT_ALL].current, 20 << 20);
  cr_expect_eq(stats_of(2).reserved_bytes[GPUPOOL_STAT_ALL].current, 20 << 20);
  gpupool_torch_empty_cache();
  cr_expect_eq(stats_of(0).reserved_bytes[GPUPOOL_STAT_ALL].current, 0);
  cr_expect_eq(stats_of(2).reserved_bytes[GPUPOOL_STAT_ALL].current, 0);
}

/* Outside PyTorch (no libc10) a private pool's refusal is a line on stderr. */
Test(torch_allocator, a_private_pool_is_refused_with_the_reason, .init = host_pools) {
  stderr_begin();
  gpupool_torch_begin_allocate_to_pool(1, (gpupool_torch_mempool_id){4, 9}, NULL);
  char err[4096] = "";
  stderr_end(err, sizeof err);
  cr_expect(strstr(err, "CUDA graph capture into a private memory pool") &&
                strstr(err, "device 1 (memory pool id (4, 9))") &&
                strstr(err, "Capture with PyTorch's own allocator"),
            "%s", err);
  cr_expect_null(gpupool_torch_pool(1), "nothing was created");
}

/* The OOM observers (torch._C._cuda_attach_out_of_memory_observer): called
 * in order before the failure, with PyTorch's arguments, the capped device
 * size where a cap is set; NULL and a 17th are refused. */
static int observed[4][4];
static int nobserved;

static void observer_a(int device, size_t requested, size_t total, size_t free_b) {
  observed[nobserved][0] = 'a';
  observed[nobserved][1] = device;
  observed[nobserved][2] = (int)(requested >> 20);
  observed[nobserved][3] = (int)(total >> 20) * 1000 + (int)(free_b >> 20);
  nobserved++;
}

static void observer_b(int device, size_t requested, size_t total, size_t free_b) {
  (void)requested, (void)total, (void)free_b;
  observed[nobserved][0] = 'b';
  observed[nobserved][1] = device;
  nobserved++;
}

Test(torch_allocator, oom_observers_are_called_before_the_failure, .init = host_pools) {
  cr_assert_eq(gpupool_torch_attach_oom_observer(NULL), GPUPOOL_ERR_INVALID);
  cr_assert_eq(gpupool_torch_attach_oom_observer(observer_a), GPUPOOL_OK);
  cr_assert_eq(gpupool_torch_attach_oom_observer(observer_b), GPUPOOL_OK);
  void *kept = gpupool_torch_malloc(4 << 20, 2, NULL); /* a 20 MiB segment */
  cr_assert_not_null(kept);
  gpupool_torch_set_memory_fraction(0.5, 2); /* 32 MiB of 64 */
  stderr_begin();
  cr_expect_null(gpupool_torch_malloc(20 << 20, 2, NULL)); /* a second segment: past 32 */
  char err[4096] = "";
  stderr_end(err, sizeof err);
  cr_assert_eq(nobserved, 2, "each observer once: %d", nobserved);
  cr_expect_eq(observed[0][0], 'a');
  cr_expect_eq(observed[0][1], 2);
  cr_expect_eq(observed[0][2], 20);
  cr_expect_eq(observed[0][3], 32 * 1000 + 44, "the cap (32 MiB), 44 MiB free: %d", observed[0][3]);
  cr_expect_eq(observed[1][0], 'b', "in the order given");
  cr_expect(strstr(err, "CUDA out of memory."), "%s", err);
  for (int i = 2; i < 16; i++)
    cr_assert_eq(gpupool_torch_attach_oom_observer(observer_b), GPUPOOL_OK);
  cr_expect_eq(gpupool_torch_attach_oom_observer(observer_b), GPUPOOL_ERR_UNSUPPORTED);
  cr_expect(strstr(gpupool_last_error(), "16 observers already"), "%s", gpupool_last_error());
  gpupool_torch_free(kept, 4 << 20, 2, NULL);
}
