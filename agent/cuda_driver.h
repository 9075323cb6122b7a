/* The CUDA driver API (libcuda.so.1), opened with dlopen at run time so that
 * the library loads and runs on machines without a driver. Only the calls
 * the agent needs to decide whether a GPU is there and to name it; none of
 * them creates a context. */
#ifndef GPUPOOL_CUDA_DRIVER_H
#define GPUPOOL_CUDA_DRIVER_H

#include <stddef.h>

/* CUresult is an int-sized enum; CUdevice an int. Declared here without
 * cuda.h so that callers build without the toolkit. */
typedef int cuda_driver_result;

typedef struct cuda_driver {
  cuda_driver_result (*init)(unsigned flags);                 /* cuInit */
  cuda_driver_result (*device_get_count)(int *count);         /* cuDeviceGetCount */
  cuda_driver_result (*device_get)(int *device, int ordinal); /* cuDeviceGet */
  cuda_driver_result (*device_get_name)(char *name, int len, int device);
  cuda_driver_result (*device_get_uuid)(unsigned char uuid[16], int device); /* _v2 */
  cuda_driver_result (*device_total_mem)(size_t *bytes, int device);         /* _v2 */
  cuda_driver_result (*get_error_name)(cuda_driver_result r, const char **name);
} cuda_driver;

#define CUDA_DRIVER_SUCCESS         0
#define CUDA_DRIVER_NOT_INITIALIZED 3
#define CUDA_DRIVER_NO_DEVICE       100

/* Opens libcuda.so.1 once (thread-safe) and resolves every function. NULL
 * when the library or a symbol is missing; then *why (static or owned by
 * this module, never freed) says which. Never calls into the driver. */
const cuda_driver *cuda_driver_load(const char **why);

/* Result of asking the driver how many devices it sees (cuInit + count). */
typedef enum {
  CUDA_DEVICES_PRESENT = 0, /* count > 0 */
  CUDA_DEVICES_NONE,        /* the driver works and sees no GPU */
  CUDA_DEVICES_NO_DRIVER,   /* no libcuda.so.1, or cuInit failed otherwise */
  CUDA_DEVICES_NOT_READY,   /* CUDA_ERROR_NOT_INITIALIZED: init still in progress */
} cuda_devices_state;

/* cuInit(0) (unless init is 0: the application initialised the driver)
 * then cuDeviceGetCount. *count gets the number of devices (0 on failure);
 * *why a one-line reason when not PRESENT (static storage or a thread-local
 * buffer: copy it before the next call). */
cuda_devices_state cuda_driver_devices(int init, int *count, const char **why);

/* The injection entry point (inject/) runs inside the application's cuInit.
 * From that call stack no driver call may be made (it would re-enter cuInit);
 * inject/ marks the process, and code that would ask the driver something
 * while starting (the agent's device info, CUPTI's device check) defers it to
 * its own thread when cuda_driver_injected() is true. */
void cuda_driver_mark_injected(void);
int cuda_driver_injected(void);

#endif
