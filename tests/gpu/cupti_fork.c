/* fork() in the middle of a recording process: the child neither flushes
 * nor calls CUDA or CUPTI, its exit is prompt (a child that flushed CUPTI in
 * its exit handler hung for 30 s), and the parent goes on recording. */
#include "cupti_gpu.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Waits for pid up to limit_ms; kills it past that. Returns its wait status,
 * or -1 when it had to be killed. */
static int wait_bounded(pid_t pid, int limit_ms) {
  int status = 0;
  for (int waited = 0; waited < limit_ms; waited += 10) {
    if (waitpid(pid, &status, WNOHANG) == pid)
      return status;
    struct timespec t = {0, 10000000};
    nanosleep(&t, NULL);
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

Test(cupti_fork, child_exits_promptly_and_parent_keeps_recording) {
  cupti_require_recording("fork");
  void *before = NULL;
  CUDA_OK(cudaMalloc(&before, 2 * MiB));
  cupti_flush();

  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    /* The child: every entry point is safe and none reaches CUPTI. */
    cupti_metrics m;
    cupti_get_metrics(&m);
    int ok = m.up == 0 && strcmp(m.reason, "forked_child") == 0;
    cupti_flush();
    cupti_stop();
    ok = ok && cupti_start(GPUPOOL_CUPTI_AUTO) == GPUPOOL_OK;
    exit(ok ? 0 : 3); /* runs the inherited exit handlers: they must do nothing */
  }
  int status = wait_bounded(pid, 10000);
  cr_assert_neq(status, -1, "the child did not exit within 10 s");
  cr_assert(WIFEXITED(status), "the child died: status %#x", status);
  cr_assert_eq(WEXITSTATUS(status), 0, "the child saw a wrong CUPTI state");

  cupti_metrics m;
  cupti_get_metrics(&m);
  cr_assert_eq(m.up, 1, "the parent still records (reason %s)", m.reason);
  void *after = NULL;
  CUDA_OK(cudaMalloc(&after, 4 * MiB));
  cupti_expect_alloc((uint64_t)after, 4 * MiB, CUPTI_ACTIVITY_MEMORY_KIND_DEVICE, OWNER_OTHER);
  CUDA_OK(cudaFree(after));
  CUDA_OK(cudaFree(before));
}

/* The owner's own exit: the exit handler flushes forced and returns. The
 * test process must not touch CUDA before this fork (a child cannot use
 * CUDA initialised by its parent), so the child checks for a device. */
Test(cupti_fork, owner_exit_is_prompt) {
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
      exit(77);
    if (cupti_start(GPUPOOL_CUPTI_FORCE) != GPUPOOL_OK)
      exit(4);
    void *p = NULL;
    if (cudaMalloc(&p, 2 * MiB) != cudaSuccess)
      exit(5);
    exit(0); /* no stop: the exit handler must flush and let the process end */
  }
  int status = wait_bounded(pid, 20000);
  cr_assert_neq(status, -1, "the recording process did not exit within 20 s");
  cr_assert(WIFEXITED(status), "status %#x", status);
  if (WEXITSTATUS(status) == 77)
    cr_skip("no CUDA device visible");
  cr_assert_eq(WEXITSTATUS(status), 0, "child exit code %d (4: CUPTI, 5: cudaMalloc)",
               WEXITSTATUS(status));
}
