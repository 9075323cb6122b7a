/* Every degraded path of the CUPTI subscriber on a machine without a GPU:
 * AUTO keeps going with up = 0 and a reason, FORCE fails, nothing aborts.
 * (Each Criterion test runs in its own process, so each starts fresh.) */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/cupti.h"
#include "gpupool/agent.h"

static cupti_metrics g_m;

static const cupti_metrics *metrics(void) {
  cupti_get_metrics(&g_m);
  return &g_m;
}

static int is_one_of(const char *s, const char *const *set) {
  for (; *set; set++)
    if (strcmp(s, *set) == 0)
      return 1;
  return 0;
}

/* Skips when this machine has a GPU, a driver and CUPTI (nothing degrades). */
static void start_auto_or_skip(void) {
  cr_assert_eq(cupti_start(GPUPOOL_CUPTI_AUTO), GPUPOOL_OK);
  if (metrics()->up) {
    cupti_stop();
    cr_skip("CUPTI records on this machine (a GPU is present): no degraded path to test");
  }
}

Test(cupti_degraded, before_any_start_it_is_off) {
  const cupti_metrics *m = metrics();
  cr_assert_eq(m->up, 0);
  cr_assert_str_eq(m->reason, "off");
  cr_assert_null(cupti_event_ring());
}

Test(cupti_degraded, auto_without_gpu_returns_ok_with_a_reason) {
  start_auto_or_skip();
  const cupti_metrics *m = metrics();
  cr_assert_eq(m->up, 0);
  const char *const expected[] = {"no_driver", "no_device", "no_cupti", NULL};
  cr_assert(is_one_of(m->reason, expected), "reason %s", m->reason);
  cr_assert_eq(m->records_total, 0);
  cr_assert_eq(m->ndevices, 0);
  cr_assert_null(cupti_event_ring());
}

Test(cupti_degraded, force_without_gpu_fails_with_the_reason) {
  start_auto_or_skip();
  const char *auto_reason = metrics()->reason;
  gpupool_status s = cupti_start(GPUPOOL_CUPTI_FORCE);
  cr_assert_neq(s, GPUPOOL_OK);
  cr_assert_eq(s, GPUPOOL_ERR_UNSUPPORTED);
  cr_assert_eq(metrics()->up, 0);
  cr_assert_str_eq(metrics()->reason, auto_reason);
  cr_assert(strstr(gpupool_last_error(), auto_reason), "last error: %s", gpupool_last_error());
}

Test(cupti_degraded, missing_cupti_library_is_no_cupti) {
  setenv("GPUPOOL_CUPTI_PATH", "/nonexistent/libcupti.so", 1);
  cr_assert_eq(cupti_start(GPUPOOL_CUPTI_AUTO), GPUPOOL_OK);
  cr_assert_eq(metrics()->up, 0);
  cr_assert_str_eq(metrics()->reason, "no_cupti");
  cr_assert_eq(cupti_start(GPUPOOL_CUPTI_FORCE), GPUPOOL_ERR_UNSUPPORTED);
#ifdef GPUPOOL_HAVE_CUDA
  cr_assert(strstr(gpupool_last_error(), "/nonexistent/libcupti.so"), "last error: %s",
            gpupool_last_error());
#else
  cr_assert(strstr(gpupool_last_error(), "without CUDA"), "last error: %s", gpupool_last_error());
#endif
}

Test(cupti_degraded, a_library_that_is_not_cupti_is_no_cupti) {
  setenv("GPUPOOL_CUPTI_PATH", "libc.so.6", 1);
  cr_assert_eq(cupti_start(GPUPOOL_CUPTI_AUTO), GPUPOOL_OK);
  cr_assert_str_eq(metrics()->reason, "no_cupti");
}

Test(cupti_degraded, off_mode_loads_nothing) {
  setenv("GPUPOOL_CUPTI_PATH", "/nonexistent/libcupti.so", 1);
  cr_assert_eq(cupti_start(GPUPOOL_CUPTI_OFF), GPUPOOL_OK);
  cr_assert_eq(metrics()->up, 0);
  cr_assert_str_eq(metrics()->reason, "off");
}

Test(cupti_degraded, repeated_start_stop_is_safe) {
  start_auto_or_skip();
  const char *reason = metrics()->reason;
  for (int i = 0; i < 5; i++) {
    cr_assert_eq(cupti_start(GPUPOOL_CUPTI_AUTO), GPUPOOL_OK);
    cupti_flush();
    cupti_stop();
    cupti_stop();
    cupti_handover();
  }
  cr_assert_eq(metrics()->up, 0);
  cr_assert_str_eq(metrics()->reason, reason, "a stop never hides why CUPTI is off");
  cr_assert_eq(metrics()->flushes_total, 0);
}

Test(cupti_degraded, public_release_and_acquire) {
  start_auto_or_skip();
  cr_assert_eq(gpupool_agent_cupti_release(), GPUPOOL_OK, "nothing to release is fine");
  gpupool_status s = gpupool_agent_cupti_acquire();
  cr_assert_neq(s, GPUPOOL_OK, "acquire reports that CUPTI cannot record here");
  cr_assert_neq(gpupool_last_error()[0], '\0');
  cr_assert_eq(metrics()->up, 0);
}

Test(cupti_degraded, metrics_are_readable_from_any_state) {
  for (int i = 0; i < 3; i++) {
    const cupti_metrics *m = metrics();
    cr_assert_not_null(m->reason);
    cr_assert_eq(m->records_dropped_total, 0);
    cr_assert_eq(m->buffers_exhausted_total, 0);
    cupti_start(i == 1 ? GPUPOOL_CUPTI_OFF : GPUPOOL_CUPTI_AUTO);
  }
}

/* FORCE's failure is the start's status with its reason: the library
 * prints nothing of it (before, it also wrote AUTO's line on stderr). */
Test(cupti_degraded, force_prints_nothing, .init = cr_redirect_stderr) {
  gpupool_status s = cupti_start(GPUPOOL_CUPTI_FORCE);
  if (s == GPUPOOL_OK) {
    cupti_stop();
    cr_skip("CUPTI records on this machine (a GPU is present): no degraded path to test");
  }
  fflush(stderr);
  char text[512] = "";
  size_t n = fread(text, 1, sizeof text - 1, cr_get_redirected_stderr());
  text[n] = '\0';
  cr_expect_eq(n, 0, "stderr: %s", text);
  cr_expect(strstr(gpupool_last_error(), "cupti ("), "%s", gpupool_last_error());
}
