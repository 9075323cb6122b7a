/* libcupti opened with dlopen at run time: the functions the memory-activity
 * subscriber calls, resolved with dlsym into one table. Only with CUDA. */
#ifndef GPUPOOL_CUPTI_LIB_H
#define GPUPOOL_CUPTI_LIB_H

#ifdef GPUPOOL_HAVE_CUDA
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>
#include <cupti_version.h>

/* CUPTI 13.0 Update 1: one subscriber, NULL buffers allowed, MEMORY2 records
 * as CUpti_ActivityMemory4. */
#define CUPTI_LIB_MIN_VERSION 130001u

typedef struct cupti_lib {
  CUptiResult (*get_version)(uint32_t *version);
  CUptiResult (*get_result_string)(CUptiResult r, const char **str);
  CUptiResult (*subscribe)(CUpti_SubscriberHandle *s, CUpti_CallbackFunc cb, void *user);
  /* Optional (NULL when absent): also names the subscriber already there. */
  CUptiResult (*subscribe_v2)(CUpti_SubscriberHandle *s, CUpti_CallbackFunc cb, void *user,
                              CUpti_SubscriberParams *params);
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle s);
  CUptiResult (*finalize)(void);
  CUptiResult (*activity_register_callbacks)(CUpti_BuffersCallbackRequestFunc requested,
                                             CUpti_BuffersCallbackCompleteFunc completed);
  CUptiResult (*activity_set_attribute)(CUpti_ActivityAttribute attr, size_t *size, void *value);
  CUptiResult (*activity_enable)(CUpti_ActivityKind kind);
  CUptiResult (*activity_disable)(CUpti_ActivityKind kind);
  CUptiResult (*activity_flush_all)(uint32_t flag);
  CUptiResult (*activity_get_next_record)(uint8_t *buffer, size_t valid, CUpti_Activity **record);
  CUptiResult (*activity_get_num_dropped_records)(CUcontext ctx, uint32_t stream, size_t *dropped);
} cupti_lib;

/* Opens libcupti once: GPUPOOL_CUPTI_PATH when set (and only it), else
 * libcupti.so.13, else libcupti.so. NULL with a one-line *why when no library
 * opens. Does not call into CUPTI. */
const cupti_lib *cupti_lib_open(const char **why);

/* After the version check: NULL when a required function is missing, with
 * *why naming it; subscribe_v2 may be NULL. */
const cupti_lib *cupti_lib_resolve(const char **why);

/* "CUPTI_ERROR_..." for r (never NULL). */
const char *cupti_lib_result_string(CUptiResult r);
#endif

#endif
