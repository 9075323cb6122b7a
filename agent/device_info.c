#include "device_info.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cuda_driver.h"

/* Context calls beyond the shared loader's set (cuda_driver.h), resolved from
 * the same libcuda.so.1 handle. */
typedef struct ctx_api {
  cuda_driver_result (*primary_ctx_get_state)(int dev, unsigned *flags, int *active);
  cuda_driver_result (*primary_ctx_retain)(void **ctx, int dev);
  cuda_driver_result (*primary_ctx_release)(int dev);                          /* _v2 */
  cuda_driver_result (*ctx_push)(void *ctx);                                   /* _v2 */
  cuda_driver_result (*ctx_pop)(void **ctx);                                   /* _v2 */
  cuda_driver_result (*mem_get_info)(size_t *free_bytes, size_t *total_bytes); /* _v2 */
} ctx_api;

static ctx_api g_ctx;
static int g_ctx_ok;
static pthread_once_t g_ctx_once = PTHREAD_ONCE_INIT;

static void load_ctx_api(void) {
  if (!cuda_driver_load(NULL))
    return;
  void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
  if (!h)
    return;
  static const char *const names[] = {"cuDevicePrimaryCtxGetState",   "cuDevicePrimaryCtxRetain",
                                      "cuDevicePrimaryCtxRelease_v2", "cuCtxPushCurrent_v2",
                                      "cuCtxPopCurrent_v2",           "cuMemGetInfo_v2"};
  void *fns[6];
  for (int i = 0; i < 6; i++) {
    fns[i] = dlsym(h, names[i]);
    if (!fns[i])
      return; /* handle stays open, shared with cuda_driver.c */
  }
  memcpy(&g_ctx.primary_ctx_get_state, &fns[0], sizeof fns[0]);
  memcpy(&g_ctx.primary_ctx_retain, &fns[1], sizeof fns[1]);
  memcpy(&g_ctx.primary_ctx_release, &fns[2], sizeof fns[2]);
  memcpy(&g_ctx.ctx_push, &fns[3], sizeof fns[3]);
  memcpy(&g_ctx.ctx_pop, &fns[4], sizeof fns[4]);
  memcpy(&g_ctx.mem_get_info, &fns[5], sizeof fns[5]);
  g_ctx_ok = 1;
}

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static device_entry g_devices[DEVICE_INFO_MAX];
static size_t g_ndevices;

void device_uuid_format(const unsigned char u[16], char *out) {
  snprintf(out, DEVICE_UUID_MAX,
           "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0], u[1],
           u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14],
           u[15]);
}

int device_info_in_primary_ctx(int ordinal, void (*fn)(void *arg), void *arg) {
  pthread_once(&g_ctx_once, load_ctx_api);
  const cuda_driver *d = cuda_driver_load(NULL);
  if (!g_ctx_ok || !d)
    return -1;
  int dev;
  unsigned flags;
  int active = 0;
  if (d->device_get(&dev, ordinal) != CUDA_DRIVER_SUCCESS ||
      g_ctx.primary_ctx_get_state(dev, &flags, &active) != CUDA_DRIVER_SUCCESS || !active)
    return -1;
  /* Retaining an active primary context only counts a reference. (Should the
   * application reset the device between the two calls, this would create
   * one: a window of a few instructions that only cudaDeviceReset opens.) */
  void *ctx = NULL;
  if (g_ctx.primary_ctx_retain(&ctx, dev) != CUDA_DRIVER_SUCCESS)
    return -1;
  int ran = -1;
  if (g_ctx.ctx_push(ctx) == CUDA_DRIVER_SUCCESS) {
    fn(arg);
    void *popped;
    g_ctx.ctx_pop(&popped);
    ran = 0;
  }
  g_ctx.primary_ctx_release(dev);
  return ran;
}

static void read_free_memory(void *arg) {
  device_entry *e = arg;
  size_t free_bytes = 0, total_bytes = 0;
  if (g_ctx.mem_get_info(&free_bytes, &total_bytes) == CUDA_DRIVER_SUCCESS) {
    e->free_bytes = free_bytes;
    e->free_known = 1;
  }
}

/* Name, UUID and total memory of one device; 0 on success. */
static int read_static_info(const cuda_driver *d, int ordinal, device_entry *e) {
  int dev;
  unsigned char uuid[16];
  size_t total = 0;
  memset(e, 0, sizeof *e);
  e->ordinal = ordinal;
  if (d->device_get(&dev, ordinal) != CUDA_DRIVER_SUCCESS ||
      d->device_get_name(e->name, (int)sizeof e->name, dev) != CUDA_DRIVER_SUCCESS ||
      d->device_get_uuid(uuid, dev) != CUDA_DRIVER_SUCCESS ||
      d->device_total_mem(&total, dev) != CUDA_DRIVER_SUCCESS)
    return -1;
  e->name[sizeof e->name - 1] = '\0';
  device_uuid_format(uuid, e->uuid);
  e->total_bytes = total;
  return 0;
}

size_t device_info_refresh(void) {
  const cuda_driver *d = cuda_driver_load(NULL);
  int count = 0;
  /* Without cuInit, which only the application calls, the count fails with
   * CUDA_ERROR_NOT_INITIALIZED: then there is no context to read either. */
  if (!d || d->device_get_count(&count) != CUDA_DRIVER_SUCCESS || count <= 0) {
    device_info_clear();
    return 0;
  }
  if (count > DEVICE_INFO_MAX)
    count = DEVICE_INFO_MAX;

  /* Name, UUID and total never change: read them once per ordinal. */
  static device_entry known[DEVICE_INFO_MAX];
  static int known_ok[DEVICE_INFO_MAX];
  device_entry fresh[DEVICE_INFO_MAX];
  size_t n = 0;
  for (int i = 0; i < count; i++) {
    if (!known_ok[i])
      known_ok[i] = read_static_info(d, i, &known[i]) == 0;
    if (!known_ok[i])
      continue;
    fresh[n] = known[i];
    device_info_in_primary_ctx(i, read_free_memory, &fresh[n]);
    n++;
  }
  pthread_mutex_lock(&g_lock);
  memcpy(g_devices, fresh, n * sizeof fresh[0]);
  g_ndevices = n;
  pthread_mutex_unlock(&g_lock);
  return n;
}

size_t device_info_copy(device_entry *out, size_t max) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_ndevices < max ? g_ndevices : max;
  memcpy(out, g_devices, n * sizeof out[0]);
  pthread_mutex_unlock(&g_lock);
  return n;
}

void device_info_clear(void) {
  pthread_mutex_lock(&g_lock);
  g_ndevices = 0;
  pthread_mutex_unlock(&g_lock);
}
