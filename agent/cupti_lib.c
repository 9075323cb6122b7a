/* libcupti through dlopen: see cupti_lib.h. Callers serialise (cupti.c's
 * lifecycle lock); once opened, the library stays loaded for the life of the
 * process (CUPTI may still call back into buffers it holds). */
#include "cupti_lib.h"

#ifdef GPUPOOL_HAVE_CUDA
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static cupti_lib g_lib;
static void *g_handle;
static int g_resolved;
static char g_error[320];

static void *symbol(const char *name) {
  return dlsym(g_handle, name);
}

const cupti_lib *cupti_lib_open(const char **why) {
  if (g_handle)
    return &g_lib;
  const char *path = getenv("GPUPOOL_CUPTI_PATH");
  const char *const defaults[] = {"libcupti.so.13", "libcupti.so"};
  const char *tried = NULL;
  if (path && *path) {
    tried = path;
    g_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  } else {
    for (size_t i = 0; i < 2 && !g_handle; i++) {
      tried = defaults[i];
      g_handle = dlopen(defaults[i], RTLD_NOW | RTLD_LOCAL);
    }
  }
  if (!g_handle) {
    const char *e = dlerror();
    snprintf(g_error, sizeof g_error, "no CUPTI library: %s%s", e ? e : tried,
             path && *path ? " (from GPUPOOL_CUPTI_PATH)" : "");
    if (why)
      *why = g_error;
    return NULL;
  }
  g_lib.get_version = (CUptiResult(*)(uint32_t *))symbol("cuptiGetVersion");
  g_lib.get_result_string =
      (CUptiResult(*)(CUptiResult, const char **))symbol("cuptiGetResultString");
  if (!g_lib.get_version || !g_lib.get_result_string) {
    snprintf(g_error, sizeof g_error, "%s is not a CUPTI library (no cuptiGetVersion)", tried);
    dlclose(g_handle);
    g_handle = NULL;
    if (why)
      *why = g_error;
    return NULL;
  }
  return &g_lib;
}

#define RESOLVE(field, name)                                                                       \
  do {                                                                                             \
    *(void **)&g_lib.field = symbol(name);                                                         \
    if (!g_lib.field) {                                                                            \
      snprintf(g_error, sizeof g_error, "libcupti has no %s", name);                               \
      if (why)                                                                                     \
        *why = g_error;                                                                            \
      return NULL;                                                                                 \
    }                                                                                              \
  } while (0)

const cupti_lib *cupti_lib_resolve(const char **why) {
  if (g_resolved)
    return &g_lib;
  RESOLVE(subscribe, "cuptiSubscribe");
  RESOLVE(unsubscribe, "cuptiUnsubscribe");
  RESOLVE(finalize, "cuptiFinalize");
  RESOLVE(activity_register_callbacks, "cuptiActivityRegisterCallbacks");
  RESOLVE(activity_set_attribute, "cuptiActivitySetAttribute");
  RESOLVE(activity_enable, "cuptiActivityEnable");
  RESOLVE(activity_disable, "cuptiActivityDisable");
  RESOLVE(activity_flush_all, "cuptiActivityFlushAll");
  RESOLVE(activity_get_next_record, "cuptiActivityGetNextRecord");
  RESOLVE(activity_get_num_dropped_records, "cuptiActivityGetNumDroppedRecords");
  *(void **)&g_lib.subscribe_v2 = symbol("cuptiSubscribe_v2");
  g_resolved = 1;
  return &g_lib;
}

const char *cupti_lib_result_string(CUptiResult r) {
  const char *s = NULL;
  if (!g_lib.get_result_string || g_lib.get_result_string(r, &s) != CUPTI_SUCCESS || !s)
    return "CUPTI_ERROR_UNKNOWN";
  return s;
}
#endif
