/* The CUPTI memory-activity subscriber: start (with every degraded mode),
 * the flush thread, stop and hand-over, fork and exit safety, and the
 * numbers the metrics writer reads. See cupti.h and docs/cupti.md.
 *
 * Locks: g_life serialises start / stop / hand-over / exit and is never taken
 * inside a CUPTI callback, so holding it across CUPTI calls cannot deadlock
 * with CUPTI's own lock. The callbacks take only the decoder's short mutex,
 * and only after CUPTI's record iterator returned (cupti_decode.h). */
#include "cupti.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_driver.h"
#include "cupti_buffers.h"
#include "cupti_decode.h"
#include "cupti_lib.h"
#include "core/clock.h"
#include "core/errors.h"
#include "segment_index.h"

static atomic_int g_up;
static _Atomic(const char *) g_reason = "off";

static void set_state(int up, const char *reason) {
  atomic_store(&g_reason, reason);
  atomic_store(&g_up, up);
}

/* Records why CUPTI is not recording: the metric's reason, and one line on
 * stderr in AUTO mode (the agent runs on without it) or the failure status
 * in FORCE mode (the start fails: the library prints nothing of it). */
__attribute__((format(printf, 4, 5))) static gpupool_status
degraded(gpupool_cupti_mode mode, const char *reason, gpupool_status status, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  set_state(0, reason);
  if (mode == GPUPOOL_CUPTI_FORCE)
    return pool_fail(status, "cupti (%s): %s", reason, msg);
  /* One line per new reason: a restart that fails the same way stays quiet. */
  static _Atomic(const char *) last_printed;
  if (atomic_exchange(&last_printed, reason) != reason)
    fprintf(stderr, "gpupool: CUPTI not recording (%s): %s\n", reason, msg);
  return GPUPOOL_OK;
}

#ifdef GPUPOOL_HAVE_CUDA

static atomic_int g_in_child; /* this process is a fork() child of the recorder */

#define FLUSH_PERIOD_NS    250000000ull /* CUPTI returns only full buffers on its own */
#define LIVE_ENTRIES       65536
#define RING_EVENTS        65536
#define DECODE_BATCH       64
#define DEVICE_CHECK_TRIES 40 /* injected: 10 s for the application's cuInit */
#define EXIT_JOIN_NS       2000000000ll

static pthread_mutex_t g_life = PTHREAD_MUTEX_INITIALIZER;
static const cupti_lib *g_lib;         /* set before callbacks are registered */
static _Atomic(cupti_decoder *) g_dec; /* created once, never freed */
static CUpti_SubscriberHandle g_sub;
static int g_started;        /* under g_life: between start and stop */
static atomic_int g_exiting; /* the owner's exit handler ran */
static pid_t g_owner_pid;
static atomic_int g_active;   /* subscribed with kinds enabled */
static atomic_int g_recorded; /* CUPTI recorded at some point: the ring has its events */
static atomic_int g_flushers; /* threads inside a flush (see flush_enter) */
static atomic_uint_fast64_t g_dropped, g_flushes;

/* The flush thread. */
static pthread_t g_thread;
static int g_thread_running; /* under g_life */
static pthread_mutex_t g_wake_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_wake;
static atomic_int g_stop_thread, g_hurry;
static int g_check_devices; /* injected: the device check waits for the flush thread */
static int g_device_check_tries;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* ---- flushing ---------------------------------------------------------- */

/* A flush may run on the flush thread, on a cupti_flush caller and in the
 * exit handler at once; teardown clears g_active and then waits for the
 * flushers to leave, so no flush overlaps unsubscribe or finalize, without a
 * lock held across the CUPTI call. */
static int flush_enter(void) {
  atomic_fetch_add(&g_flushers, 1);
  if (atomic_load(&g_active))
    return 1;
  atomic_fetch_sub(&g_flushers, 1);
  return 0;
}

static void flush_leave(void) {
  atomic_fetch_sub(&g_flushers, 1);
}

static void collect_dropped(void) {
  size_t dropped = 0; /* CUPTI resets its count on each call */
  if (g_lib->activity_get_num_dropped_records(NULL, 0, &dropped) == CUPTI_SUCCESS)
    atomic_fetch_add(&g_dropped, dropped);
}

static void flush_once(uint32_t flag) {
  uint64_t began = clock_realtime_ns();
  g_lib->activity_flush_all(flag);
  collect_dropped();
  atomic_fetch_add(&g_flushes, 1);
  cupti_buffers_rezero();
  /* Every record stamped before `began` has now been decoded. */
  segment_index_purge(began);
}

/* ---- CUPTI callbacks (any thread; no lock held, no CUDA, no I/O) -------- */

static void CUPTIAPI on_api_callback(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                     const void *data) {
  /* A subscriber needs a callback; none is enabled. */
}

static void CUPTIAPI on_buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
  int low = 0;
  *max_records = 0;
  *buffer = cupti_buffers_take(&low);
  *size = *buffer ? CUPTI_BUFFER_SIZE : 0; /* NULL: CUPTI drops and counts */
  if (low && atomic_exchange(&g_hurry, 1) == 0)
    pthread_cond_signal(&g_wake);
}

static void CUPTIAPI on_buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer,
                                         size_t size, size_t valid) {
  cupti_decoder *d = atomic_load(&g_dec);
  if (!cupti_buffers_owns(buffer))
    return;
  if (d && valid && !atomic_load(&g_in_child)) {
    const CUpti_Activity *batch[DECODE_BATCH];
    size_t n = 0;
    CUpti_Activity *record = NULL;
    /* Iterate with no lock of ours held; decode in batches. */
    while (g_lib->activity_get_next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
      batch[n++] = record;
      if (n == DECODE_BATCH) {
        cupti_decoder_records(d, batch, n);
        n = 0;
      }
    }
    if (n)
      cupti_decoder_records(d, batch, n);
  }
  cupti_buffers_done(buffer);
}

static void on_segment_noted(uint64_t addr, uint64_t size) {
  cupti_decoder *d = atomic_load(&g_dec);
  if (d)
    cupti_decoder_claim(d, addr);
}

/* ---- teardown ------------------------------------------------------------ */

/* The pools stop reporting their segments to the index, which empties. */
static void forget_segments(void) {
  segment_observers_remove(segment_index_observe, NULL);
  segment_index_set_listener(NULL);
  segment_index_retain_dead(0);
  segment_index_clear();
}

/* Flush forced, disable, flush forced again (records made meanwhile),
 * unsubscribe, and cuptiFinalize on a hand-over. At exit only the forced
 * flush: CUPTI is torn down with the process. */
static void teardown(int finalize) {
  if (!atomic_exchange(&g_active, 0))
    return;
  while (atomic_load(&g_flushers))
    sched_yield();
  g_lib->activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  int exiting = atomic_load(&g_exiting);
  if (!exiting) {
    g_lib->activity_disable(CUPTI_ACTIVITY_KIND_MEMORY2);
    g_lib->activity_disable(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
    g_lib->activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  }
  collect_dropped();
  atomic_fetch_add(&g_flushes, 1);
  if (!exiting) {
    g_lib->unsubscribe(g_sub);
    if (finalize)
      g_lib->finalize();
  }
}

/* ---- the flush thread ---------------------------------------------------- */

/* Injected: the application's cuInit has returned by now (or soon); ask the
 * driver whether it sees a GPU. Returns 0 when CUPTI was torn down. */
static int deferred_device_check(void) {
  int count = 0;
  const char *why = "";
  cuda_devices_state s = cuda_driver_devices(0, &count, &why);
  if (s == CUDA_DEVICES_PRESENT) {
    g_check_devices = 0;
    return 1;
  }
  if (s == CUDA_DEVICES_NOT_READY) {
    if (++g_device_check_tries >= DEVICE_CHECK_TRIES)
      g_check_devices = 0;
    return 1;
  }
  teardown(0);
  degraded(GPUPOOL_CUPTI_AUTO, s == CUDA_DEVICES_NONE ? "no_device" : "no_driver", GPUPOOL_OK, "%s",
           why);
  return 0;
}

static void deadline_after(struct timespec *t, uint64_t ns) {
  clock_gettime(CLOCK_MONOTONIC, t);
  uint64_t total = (uint64_t)t->tv_nsec + ns;
  t->tv_sec += (time_t)(total / 1000000000ull);
  t->tv_nsec = (long)(total % 1000000000ull);
}

static void *flush_main(void *arg) {
  pthread_setname_np(pthread_self(), "gpupool-cupti");
  struct timespec next;
  deadline_after(&next, FLUSH_PERIOD_NS);
  for (;;) {
    pthread_mutex_lock(&g_wake_lock);
    while (!atomic_load(&g_stop_thread) && !atomic_load(&g_hurry))
      if (pthread_cond_timedwait(&g_wake, &g_wake_lock, &next) == ETIMEDOUT)
        break;
    pthread_mutex_unlock(&g_wake_lock);
    if (atomic_load(&g_stop_thread))
      break;
    atomic_store(&g_hurry, 0);
    deadline_after(&next, FLUSH_PERIOD_NS);
    if (g_check_devices && !deferred_device_check())
      break;
    if (flush_enter()) {
      flush_once(0);
      flush_leave();
    }
  }
  return NULL;
}

static int start_flush_thread(void) {
  atomic_store(&g_stop_thread, 0);
  atomic_store(&g_hurry, 0);
  /* The application's signal handlers never run on this thread. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&g_thread, NULL, flush_main, NULL);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  g_thread_running = rc == 0;
  return rc;
}

static void wake_flush_thread_to_stop(void) {
  pthread_mutex_lock(&g_wake_lock);
  atomic_store(&g_stop_thread, 1);
  pthread_cond_signal(&g_wake);
  pthread_mutex_unlock(&g_wake_lock);
}

static void stop_flush_thread(void) {
  if (!g_thread_running)
    return;
  wake_flush_thread_to_stop();
  pthread_join(g_thread, NULL);
  g_thread_running = 0;
}

/* ---- fork and exit --------------------------------------------------------- */

static void fork_prepare(void) {
  cupti_decoder *d = atomic_load(&g_dec);
  if (d)
    cupti_decoder_lock(d);
}

static void fork_parent(void) {
  cupti_decoder *d = atomic_load(&g_dec);
  if (d)
    cupti_decoder_unlock(d);
}

/* The child has one thread and a copy of CUPTI's state: it must never flush
 * (a child's exit handler that flushed hung for 30 s) nor call CUDA. */
static void fork_child(void) {
  cupti_decoder *d = atomic_load(&g_dec);
  if (d)
    cupti_decoder_reinit_lock(d);
  atomic_store(&g_in_child, 1);
  set_state(0, "forked_child");
}

/* Owner only: stop the flush thread (bounded) and deliver what CUPTI holds. */
static void at_exit(void) {
  if (atomic_load(&g_in_child) || getpid() != g_owner_pid)
    return;
  if (pthread_mutex_trylock(&g_life) != 0)
    return; /* a start or stop is under way */
  if (g_started) {
    int joined = 1;
    if (g_thread_running) {
      wake_flush_thread_to_stop();
      struct timespec until;
      clock_gettime(CLOCK_REALTIME, &until);
      until.tv_sec += EXIT_JOIN_NS / 1000000000ll;
      joined = pthread_timedjoin_np(g_thread, NULL, &until) == 0;
      g_thread_running = 0; /* joined, or abandoned: never joined again */
    }
    atomic_store(&g_exiting, 1);
    if (joined)
      teardown(0);
  }
  pthread_mutex_unlock(&g_life);
}

static void init_once(void) {
  pthread_condattr_t attr;
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&g_wake, &attr);
  pthread_condattr_destroy(&attr);
  pthread_atfork(fork_prepare, fork_parent, fork_child);
  atexit(at_exit);
}

/* ---- start and stop ---------------------------------------------------------- */

/* Each returns 1 on success; otherwise 0 with *st from degraded(). */
static int subscribe(gpupool_cupti_mode mode, gpupool_status *st) {
  char holder[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN] = "";
  CUptiResult r;
  if (g_lib->subscribe_v2) {
    CUpti_SubscriberParams params = {0};
    params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
    params.subscriberName = "gpupool";
    params.oldSubscriberName = holder;
    params.oldSubscriberSize = sizeof holder;
    r = g_lib->subscribe_v2(&g_sub, on_api_callback, NULL, &params);
  } else {
    r = g_lib->subscribe(&g_sub, on_api_callback, NULL);
  }
  if (r == CUPTI_SUCCESS)
    return 1;
  /* Another tool holds CUPTI: any activity call now would take its buffers. */
  if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)
    *st = degraded(mode, "other_subscriber", GPUPOOL_ERR_BACKEND,
                   "CUPTI is already used by %s; only pool memory is reported "
                   "(gpupool_agent_cupti_acquire() retries)",
                   holder[0] ? holder : "another tool (Nsight, a profiler or a debugger)");
  else
    *st = degraded(mode, "error", GPUPOOL_ERR_BACKEND, "cuptiSubscribe failed: %s%s",
                   cupti_lib_result_string(r),
                   r == CUPTI_ERROR_NOT_INITIALIZED ? " (CUPTI and driver versions differ?)" : "");
  return 0;
}

static int enable_activity(gpupool_cupti_mode mode, gpupool_status *st) {
  /* Our buffers come zeroed: CUPTI need not zero them on the requesting
   * thread. A CUPTI without the attribute zeroes them itself. */
  uint8_t zeroed = 1;
  size_t zsize = sizeof zeroed;
  g_lib->activity_set_attribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &zsize, &zeroed);
  const char *call = "cuptiActivityRegisterCallbacks";
  CUptiResult r = g_lib->activity_register_callbacks(on_buffer_requested, on_buffer_completed);
  if (r == CUPTI_SUCCESS) {
    call = "cuptiActivityEnable(MEMORY2)";
    r = g_lib->activity_enable(CUPTI_ACTIVITY_KIND_MEMORY2);
  }
  if (r == CUPTI_SUCCESS) {
    call = "cuptiActivityEnable(MEMORY_POOL)";
    r = g_lib->activity_enable(CUPTI_ACTIVITY_KIND_MEMORY_POOL);
    if (r != CUPTI_SUCCESS)
      g_lib->activity_disable(CUPTI_ACTIVITY_KIND_MEMORY2);
  }
  if (r == CUPTI_SUCCESS)
    return 1;
  g_lib->unsubscribe(g_sub);
  *st = degraded(mode, "error", GPUPOOL_ERR_BACKEND, "%s failed: %s", call,
                 cupti_lib_result_string(r));
  return 0;
}

static gpupool_status start_locked(gpupool_cupti_mode mode) {
  const char *why = "";
  const cupti_lib *lib = cupti_lib_open(&why);
  if (!lib)
    return degraded(mode, "no_cupti", GPUPOOL_ERR_UNSUPPORTED, "%s", why);
  if (!cuda_driver_load(&why))
    return degraded(mode, "no_driver", GPUPOOL_ERR_UNSUPPORTED, "%s", why);
  /* Decide from the driver, not from CUPTI (which succeeds with no GPU).
   * Injected, we run inside the application's cuInit: check later. */
  int injected = cuda_driver_injected();
  if (!injected) {
    int count = 0;
    cuda_devices_state ds = cuda_driver_devices(1, &count, &why);
    if (ds == CUDA_DEVICES_NONE)
      return degraded(mode, "no_device", GPUPOOL_ERR_UNSUPPORTED, "%s", why);
    if (ds != CUDA_DEVICES_PRESENT)
      return degraded(mode, "no_driver", GPUPOOL_ERR_UNSUPPORTED, "%s", why);
  }
  uint32_t version = 0;
  CUptiResult r = lib->get_version(&version);
  if (r != CUPTI_SUCCESS)
    return degraded(mode, "error", GPUPOOL_ERR_BACKEND, "cuptiGetVersion failed: %s",
                    cupti_lib_result_string(r));
  if (version < CUPTI_LIB_MIN_VERSION)
    return degraded(mode, "cupti_too_old", GPUPOOL_ERR_UNSUPPORTED,
                    "CUPTI API version %u, need %u (CUDA 13.0 Update 1) or newer", version,
                    CUPTI_LIB_MIN_VERSION);
  lib = cupti_lib_resolve(&why);
  if (!lib)
    return degraded(mode, "no_cupti", GPUPOOL_ERR_UNSUPPORTED, "%s", why);
  g_lib = lib;
  if (!atomic_load(&g_dec))
    atomic_store(&g_dec, cupti_decoder_create(LIVE_ENTRIES, RING_EVENTS, segment_index_contains));
  if (!atomic_load(&g_dec) || cupti_buffers_init() != 0)
    return degraded(mode, "error", GPUPOOL_ERR_BACKEND, "out of memory for CUPTI buffers");
  pthread_once(&g_once, init_once);

  gpupool_status st = GPUPOOL_OK;
  if (!subscribe(mode, &st) || !enable_activity(mode, &st))
    return st;
  atomic_store(&g_active, 1);
  g_owner_pid = getpid();
  segment_index_retain_dead(1);
  segment_index_set_listener(on_segment_noted);
  segment_observers_add(segment_index_observe, NULL); /* cannot be full: one per process */
  g_check_devices = injected;
  g_device_check_tries = 0;
  if (start_flush_thread() != 0) {
    teardown(0);
    forget_segments();
    return degraded(mode, "error", GPUPOOL_ERR_BACKEND, "cannot start the CUPTI flush thread");
  }
  g_started = 1;
  atomic_store(&g_recorded, 1);
  set_state(1, "ok");
  return GPUPOOL_OK;
}

static void stop_locked(const char *reason, int finalize) {
  stop_flush_thread();
  int was_up = atomic_load(&g_up); /* 0: degraded meanwhile, keep that reason */
  teardown(finalize);
  forget_segments();
  cupti_buffers_rezero();
  cupti_decoder_clear_live(atomic_load(&g_dec));
  g_started = 0;
  if (was_up)
    set_state(0, reason);
}

gpupool_status cupti_start(gpupool_cupti_mode mode) {
  if (atomic_load(&g_in_child))
    return degraded(mode, "forked_child", GPUPOOL_ERR_UNSUPPORTED,
                    "this process was forked from one that used CUPTI: CUDA is unusable here");
  pthread_mutex_lock(&g_life);
  gpupool_status s = GPUPOOL_OK;
  if (mode == GPUPOOL_CUPTI_OFF) {
    if (!g_started)
      set_state(0, "off");
  } else if (!g_started && !atomic_load(&g_exiting)) {
    s = start_locked(mode);
  }
  pthread_mutex_unlock(&g_life);
  return s;
}

void cupti_stop(void) {
  if (atomic_load(&g_in_child))
    return;
  pthread_mutex_lock(&g_life);
  if (g_started)
    stop_locked("stopped", 0);
  pthread_mutex_unlock(&g_life);
}

void cupti_handover(void) {
  if (atomic_load(&g_in_child))
    return;
  pthread_mutex_lock(&g_life);
  if (g_started)
    stop_locked("released", 1);
  pthread_mutex_unlock(&g_life);
}

void cupti_flush(void) {
  if (atomic_load(&g_in_child) || !flush_enter())
    return;
  flush_once(0);
  flush_leave();
}

void cupti_get_metrics(cupti_metrics *out) {
  memset(out, 0, offsetof(cupti_metrics, devices));
  out->up = atomic_load(&g_up);
  out->reason = atomic_load(&g_reason);
  out->records_dropped_total = atomic_load(&g_dropped);
  out->buffers_exhausted_total = cupti_buffers_exhausted();
  out->flushes_total = atomic_load(&g_flushes);
  cupti_decoder *d = atomic_load(&g_dec);
  if (d)
    cupti_decoder_read(d, out);
}

event_ring *cupti_event_ring(void) {
  cupti_decoder *d = atomic_load(&g_dec);
  return d && atomic_load(&g_recorded) ? cupti_decoder_ring(d) : NULL;
}

#else /* built without CUDA: nothing to observe */

gpupool_status cupti_start(gpupool_cupti_mode mode) {
  if (mode == GPUPOOL_CUPTI_OFF) {
    set_state(0, "off");
    return GPUPOOL_OK;
  }
  return degraded(mode, "no_cupti", GPUPOOL_ERR_UNSUPPORTED, "gpupool was built without CUDA");
}

void cupti_stop(void) {}
void cupti_handover(void) {}
void cupti_flush(void) {}

void cupti_get_metrics(cupti_metrics *out) {
  memset(out, 0, offsetof(cupti_metrics, devices));
  out->up = 0;
  out->reason = atomic_load(&g_reason);
}

event_ring *cupti_event_ring(void) {
  return NULL;
}
#endif
