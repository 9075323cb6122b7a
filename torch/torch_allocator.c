/* gpupool as PyTorch's pluggable CUDA allocator; see include/gpupool/torch.h.
 *
 * The fast path is one acquire load of the device's pool pointer; pools are
 * created under a lock the first time a device is used, and published with a
 * release store so that everything set up before (the record file) is
 * visible to every thread that sees the pool. */
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/kvconf.h"
#include "cxx_raise.h"
#include "gpupool/agent.h"
#include "gpupool/torch.h"

#define TORCH_MAX_DEVICES 64

static _Atomic(gpupool *) pools[TORCH_MAX_DEVICES];
static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;
/* set_per_process_memory_fraction before a device's first allocation: the
 * fraction its pool is created with, where given. Under create_lock. */
static double fraction_at_create[TORCH_MAX_DEVICES];
static unsigned char fraction_given[TORCH_MAX_DEVICES];
static int setup_done;         /* under create_lock */
static FILE *record;           /* GPUPOOL_RECORD; written before the first pool is published */
static char record_path[4096]; /* its name, for the message of a failed write */
/* Under record's lock (flockfile): */
static int record_stopped; /* a write failed: nothing more is written */
static int record_exiting; /* past the exit handler's flush: each line is flushed */

/* The first write that fails (a full disk) stops the recording, with one
 * line on stderr: a record with a hole would replay as another run. Under
 * record's lock. */
static void record_stop(int err) {
  record_stopped = 1;
  fprintf(stderr,
          "gpupool_torch: GPUPOOL_RECORD=%s: write failed: %s; recording stopped, the "
          "file is incomplete\n",
          record_path, strerror(err));
}

/* One line of the record, under its lock (the caller holds it). */
__attribute__((format(printf, 1, 2))) static void record_line(const char *fmt, ...) {
  if (record_stopped)
    return;
  va_list ap;
  va_start(ap, fmt);
  int rc = vfprintf(record, fmt, ap);
  va_end(ap);
  if (rc < 0 || (record_exiting && fflush(record) != 0))
    record_stop(errno);
}

/* The file is never closed, since PyTorch may free tensors from static
 * destructors that run during exit, and exit()'s own flush of what stdio
 * holds is not checked: this handler flushes and checks it, and from then
 * on every line is flushed as it is written. */
static void record_flush_at_exit(void) {
  flockfile(record);
  if (!record_stopped && fflush(record) != 0)
    record_stop(errno);
  record_exiting = 1;
  funlockfile(record);
}

/* Once, before the first pool: the record file. Under create_lock. */
static void setup_once(void) {
  if (setup_done)
    return;
  setup_done = 1;
  const char *path = getenv("GPUPOOL_RECORD");
  if (!path || !*path)
    return;
  record = fopen(path, "w");
  if (!record) {
    fprintf(stderr, "gpupool_torch: GPUPOOL_RECORD=%s: cannot open the file: %s; not recording\n",
            path, strerror(errno));
    return;
  }
  snprintf(record_path, sizeof record_path, "%s", path);
  char *buf = malloc(1 << 20); /* lives as long as the file: the process */
  if (buf)
    setvbuf(record, buf, _IOFBF, 1 << 20);
  if (atexit(record_flush_at_exit) != 0)
    fprintf(stderr,
            "gpupool_torch: GPUPOOL_RECORD=%s: no exit handler: a write that fails at "
            "exit will not be reported\n",
            path);
}

/* Once, after the first pool exists: the agent, when it is asked for. */
static void start_agent_once(void) {
  static int tried; /* under create_lock */
  if (tried)
    return;
  tried = 1;
  const char *conf = getenv("GPUPOOL_AGENT_CONF");
  if (!conf)
    return;
  if (gpupool_agent_start(NULL) != GPUPOOL_OK)
    fprintf(stderr, "gpupool_torch: the agent did not start: %s\n", gpupool_last_error());
}

/* The options of device's pool, which GPUPOOL_CONF then overrides. */
static gpupool_options torch_pool_options(int device) {
  gpupool_options opt = {0};
  opt.name = "torch";
  opt.device = device;
  opt.backend = GPUPOOL_BACKEND_CUDA; /* GPUPOOL_CONF may choose another */
  return opt;
}

/* kvconf_parse's callback over a GPUPOOL_CONF for the adapter's pools: a
 * pool serves the device PyTorch allocates on, so a device key (which would
 * put every device's pool on one GPU) is refused, and so is the advisor's
 * sim backend, whose addresses are fake. (backend host stays: the tests of
 * this path run without a GPU on it.) The keys and values come trimmed from
 * the parser the pool itself uses. */
static int refuse_torch_key(void *ctx, const char *key, const char *value, char *err,
                            size_t errlen) {
  (void)ctx;
  if (!strcmp(key, "device")) {
    snprintf(err, errlen,
             "device: the torch adapter's pools are one per device, each on the device PyTorch "
             "allocates on (choose it with CUDA_VISIBLE_DEVICES or torch.cuda.set_device)");
    return -1;
  }
  if (!strcmp(key, "backend") && !strcmp(value, "sim")) {
    snprintf(err, errlen,
             "backend: 'sim' is the advisor's replay device, whose addresses are fake: the torch "
             "adapter's pools need cuda or cuda_async (host for tests without a GPU)");
    return -1;
  }
  return 0;
}

/* GPUPOOL_OK where conf has none of the keys refuse_torch_key refuses, else
 * GPUPOOL_ERR_INVALID with the reason. */
static gpupool_status torch_keys_check(const char *conf) {
  char why[512];
  if (kvconf_parse(conf, refuse_torch_key, NULL, why, sizeof why) != 0)
    return pool_fail(GPUPOOL_ERR_INVALID, "GPUPOOL_CONF: %s", why);
  return GPUPOOL_OK;
}

gpupool_status gpupool_torch_conf_check(const char *conf) {
  gpupool_status st = torch_keys_check(conf);
  if (st != GPUPOOL_OK)
    return st;
  gpupool_options opt = torch_pool_options(0);
  return gpupool_conf_check(&opt, conf);
}

/* The device's pool, created at its first use; NULL with gpupool_last_error()
 * set when it cannot be created. */
static gpupool *create_pool(int device) {
  pthread_mutex_lock(&create_lock);
  gpupool *p = atomic_load_explicit(&pools[device], memory_order_relaxed);
  if (!p) {
    setup_once();
    gpupool_options opt = torch_pool_options(device);
    /* gpupool_create checks the rest of GPUPOOL_CONF as it reads it */
    if (torch_keys_check(getenv("GPUPOOL_CONF")) == GPUPOOL_OK &&
        gpupool_create(&opt, &p) == GPUPOOL_OK) {
      if (fraction_given[device]) /* checked when it was given */
        gpupool_set_memory_fraction(p, fraction_at_create[device]);
      atomic_store_explicit(&pools[device], p, memory_order_release);
      start_agent_once();
    } else {
      p = NULL;
    }
  }
  pthread_mutex_unlock(&create_lock);
  return p;
}

/* Whether PyTorch is in the process (its libc10 is loaded), i.e. whether the
 * caller is its pluggable allocator. */
static int inside_pytorch(void) {
  void *c10 = dlopen("libc10.so", RTLD_NOW | RTLD_NOLOAD);
  if (!c10)
    return 0;
  dlclose(c10); /* drops the reference NOLOAD took */
  return 1;
}

/* The out-of-memory observers, appended under observers_lock and published
 * by the count (release): a reader sees every slot below it. */
#define TORCH_MAX_OOM_OBSERVERS 16
static gpupool_torch_oom_observer oom_observers[TORCH_MAX_OOM_OBSERVERS];
static _Atomic int oom_observer_count;
static pthread_mutex_t observers_lock = PTHREAD_MUTEX_INITIALIZER;

gpupool_status gpupool_torch_attach_oom_observer(gpupool_torch_oom_observer fn) {
  if (!fn)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "gpupool_torch_attach_oom_observer: the observer is NULL");
  gpupool_status st = GPUPOOL_OK;
  pthread_mutex_lock(&observers_lock);
  int n = atomic_load_explicit(&oom_observer_count, memory_order_relaxed);
  if (n == TORCH_MAX_OOM_OBSERVERS) {
    st = GPUPOOL_ERR_UNSUPPORTED;
  } else {
    oom_observers[n] = fn;
    atomic_store_explicit(&oom_observer_count, n + 1, memory_order_release);
  }
  pthread_mutex_unlock(&observers_lock);
  if (st != GPUPOOL_OK)
    return pool_fail(st, "gpupool_torch_attach_oom_observer: %d observers already",
                     TORCH_MAX_OOM_OBSERVERS);
  return GPUPOOL_OK;
}

/* Calls the observers of an OOM on device, with what PyTorch's allocator
 * passes: the device's memory (its cap where the pool has one) and its free
 * memory, read now (a device call, outside every lock). */
static void tell_oom_observers(int device, size_t size) {
  int n = atomic_load_explicit(&oom_observer_count, memory_order_acquire);
  if (!n)
    return;
  size_t free_b = 0, total_b = 0;
  gpupool *p = gpupool_torch_pool(device);
  if (p && gpupool_mem_get_info(p, &free_b, &total_b) == GPUPOOL_OK)
    total_b = (size_t)(gpupool_memory_fraction(p) * (double)total_b);
  for (int i = 0; i < n; i++)
    oom_observers[i](device, size, total_b, free_b);
}

/* PyTorch does not check the pointer a pluggable allocator returns: NULL
 * would become a tensor at address 0 and the next kernel would fault. So
 * inside PyTorch a failure is thrown as a C++ exception, which PyTorch raises
 * in Python carrying this message: out of memory as c10::OutOfMemoryError,
 * torch.OutOfMemoryError in Python (what its own allocator raises, and what
 * `except torch.cuda.OutOfMemoryError` catches), where the PyTorch libraries
 * allow (cxx_raise.h), any other failure (and OOM where they do not) as
 * std::runtime_error, a RuntimeError. Elsewhere (a C program, which could not
 * catch it) it is a line on stderr and NULL. Out of memory starts with
 * PyTorch's own words, which batch-size finders (accelerate's
 * find_executable_batch_size) match on. */
static void *fail(size_t size, int device, gpupool_status st, const char *why) {
  static const char oom[] = "CUDA out of memory.";
  char msg[1536];
  if (st == GPUPOOL_ERR_OOM && strncmp(why, oom, sizeof oom - 1) == 0)
    snprintf(msg, sizeof msg, "%s [gpupool_torch, device %d]", why, device);
  else if (st == GPUPOOL_ERR_OOM)
    snprintf(msg, sizeof msg, "%s Tried to allocate %zu bytes on device %d (gpupool): %s", oom,
             size, device, why);
  else
    snprintf(msg, sizeof msg, "gpupool_torch: cannot allocate %zu bytes on device %d: %s", size,
             device, why);
  if (st == GPUPOOL_ERR_OOM) /* after msg: an observer may change gpupool_last_error() */
    tell_oom_observers(device, size);
  if (inside_pytorch()) {
    if (st == GPUPOOL_ERR_OOM)
      cxx_raise_torch_oom(msg, "gpupool_torch_malloc", __FILE__, __LINE__);
    cxx_raise_runtime_error(msg);
  }
  fprintf(stderr, "%s\n", msg);
  return NULL;
}

void *gpupool_torch_malloc(size_t size, int device, void *stream) {
  if (size == 0)
    return NULL; /* empty tensors: PyTorch expects no storage */
  if (device < 0 || device >= TORCH_MAX_DEVICES)
    return fail(size, device, GPUPOOL_ERR_INVALID, "no such device");
  gpupool *p = atomic_load_explicit(&pools[device], memory_order_acquire);
  if (!p && !(p = create_pool(device)))
    return fail(size, device, GPUPOOL_ERR_BACKEND, gpupool_last_error());
  void *ptr = NULL;
  /* Recording, the file's lock is held over the call and its line, so that
   * the lines follow the pool's order (gpupool_torch_free). */
  if (record)
    flockfile(record);
  gpupool_status st = gpupool_malloc(p, &ptr, size, stream);
  /* The device after the stream, where not 0: a process's devices share one
   * file, and a single-device run's lines stay as they always were. */
  if (record && st == GPUPOOL_OK && device)
    record_line("a 0x%" PRIxPTR " %zu 0x%" PRIxPTR " %d\n", (uintptr_t)ptr, size, (uintptr_t)stream,
                device);
  else if (record && st == GPUPOOL_OK)
    record_line("a 0x%" PRIxPTR " %zu 0x%" PRIxPTR "\n", (uintptr_t)ptr, size, (uintptr_t)stream);
  if (record)
    funlockfile(record);
  if (st != GPUPOOL_OK)
    return fail(size, device, st, gpupool_last_error());
  return ptr;
}

void gpupool_torch_free(void *ptr, size_t size, int device, void *stream) {
  if (!ptr)
    return;
  gpupool *p = gpupool_torch_pool(device);
  if (!p) {
    fprintf(stderr, "gpupool_torch: free of %p on device %d, which has no pool\n", ptr, device);
    return;
  }
  /* The line is written only for a free the pool took (a refused one, a
   * double or foreign free, must not end a recorded allocation of that
   * address), under the file's lock with the free: another thread handed
   * the same address cannot write its "a" line before this "f". */
  if (record)
    flockfile(record);
  gpupool_status st = gpupool_free(p, ptr);
  if (record && st == GPUPOOL_OK)
    record_line("f 0x%" PRIxPTR "\n", (uintptr_t)ptr);
  if (record)
    funlockfile(record);
  if (st == GPUPOOL_ERR_UNSUPPORTED) {
    /* A forked child freeing its parent's memory (gpupool_free refuses
     * nothing else so): every such free is refused alike, and a worker that
     * drops the parent's tensors would print a line for each. */
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
      fprintf(stderr,
              "gpupool_torch: free of %p on device %d: %s (said once: this process's "
              "frees of its parent's memory are all ignored)\n",
              ptr, device, gpupool_last_error());
  } else if (st != GPUPOOL_OK) {
    fprintf(stderr, "gpupool_torch: free of %p on device %d: %s\n", ptr, device,
            gpupool_last_error());
  }
}

void gpupool_torch_record_stream(void *ptr, void *stream) {
  if (!ptr)
    return;
  /* PyTorch passes no device: the pool that holds ptr takes it (the others
   * refuse it as not theirs, GPUPOOL_ERR_INVALID). The line is written with
   * the call that took it, under the file's lock, as a free's is. */
  gpupool_status st = GPUPOOL_ERR_INVALID;
  int pools_asked = 0;
  for (int device = 0; device < TORCH_MAX_DEVICES && st == GPUPOOL_ERR_INVALID; device++) {
    gpupool *p = gpupool_torch_pool(device);
    if (!p)
      continue;
    pools_asked++;
    if (record)
      flockfile(record);
    st = gpupool_record_stream(p, ptr, stream);
    if (record && st == GPUPOOL_OK)
      record_line("r 0x%" PRIxPTR " 0x%" PRIxPTR "\n", (uintptr_t)ptr, (uintptr_t)stream);
    if (record)
      funlockfile(record);
  }
  if (st == GPUPOOL_ERR_INVALID)
    fprintf(stderr,
            "gpupool_torch: record_stream of %p on stream %p: no pool holds it (%d asked); its "
            "reuse will not wait for that stream\n",
            ptr, stream, pools_asked);
  else if (st == GPUPOOL_ERR_UNSUPPORTED) {
    /* Above all a forked child using its parent's tensors, as with frees: a
     * line for each call would flood stderr. */
    static _Atomic int said;
    if (!atomic_exchange(&said, 1))
      fprintf(stderr,
              "gpupool_torch: record_stream of %p on stream %p: %s (said once: later "
              "record_streams refused so are not reported)\n",
              ptr, stream, gpupool_last_error());
  } else if (st != GPUPOOL_OK) {
    fprintf(stderr, "gpupool_torch: record_stream of %p on stream %p: %s\n", ptr, stream,
            gpupool_last_error());
  }
}

gpupool *gpupool_torch_pool(int device) {
  if (device < 0 || device >= TORCH_MAX_DEVICES)
    return NULL;
  return atomic_load_explicit(&pools[device], memory_order_acquire);
}

void gpupool_torch_set_memory_fraction(double fraction, int device) {
  if (device < 0 || device >= TORCH_MAX_DEVICES || !(fraction >= 0 && fraction <= 1)) {
    fprintf(stderr,
            "gpupool_torch: set_per_process_memory_fraction(%g, device %d): %s; nothing "
            "changed\n",
            fraction, device,
            fraction >= 0 && fraction <= 1 ? "no such device" : "not a fraction from 0 to 1");
    return;
  }
  pthread_mutex_lock(&create_lock); /* a pool being created takes it, or sees it */
  gpupool *p = atomic_load_explicit(&pools[device], memory_order_relaxed);
  gpupool_status st = GPUPOOL_OK;
  if (p)
    st = gpupool_set_memory_fraction(p, fraction);
  else {
    fraction_at_create[device] = fraction;
    fraction_given[device] = 1;
  }
  pthread_mutex_unlock(&create_lock);
  if (st != GPUPOOL_OK)
    fprintf(stderr, "gpupool_torch: set_per_process_memory_fraction(%g, device %d): %s\n", fraction,
            device, gpupool_last_error());
}

double gpupool_torch_memory_fraction(int device) {
  if (device < 0 || device >= TORCH_MAX_DEVICES)
    return NAN;
  pthread_mutex_lock(&create_lock);
  gpupool *p = atomic_load_explicit(&pools[device], memory_order_relaxed);
  double f = fraction_given[device] ? fraction_at_create[device] : 1.0;
  pthread_mutex_unlock(&create_lock);
  return p ? gpupool_memory_fraction(p) : f;
}

void gpupool_torch_empty_cache(void) {
  for (int device = 0; device < TORCH_MAX_DEVICES; device++) {
    gpupool *p = gpupool_torch_pool(device);
    if (p)
      gpupool_empty_cache(p);
  }
}

void gpupool_torch_begin_allocate_to_pool(int device, gpupool_torch_mempool_id pool,
                                          const void *filter) {
  (void)filter;
  char msg[768];
  snprintf(msg, sizeof msg,
           "gpupool_torch: CUDA graph capture into a private memory pool (torch.cuda.graph, "
           "torch.compile(mode=\"reduce-overhead\"), torch.cuda.MemPool) is not supported on "
           "device %d (memory pool id (%llu, %llu)): gpupool keeps no private pools yet, so the "
           "graph's memory would be handed to other tensors after the capture and its replays "
           "would overwrite them. Capture with PyTorch's own allocator (without "
           "gpupool.torch.enable()), or run without CUDA graphs",
           device, pool.first, pool.second);
  if (inside_pytorch())
    cxx_raise_runtime_error(msg);
  fprintf(stderr, "%s\n", msg);
}
