/* libgpupool_inject.so: the gpupool agent in an unmodified CUDA program.
 *
 *   CUDA_INJECTION64_PATH=/path/to/libgpupool_inject.so \
 *   GPUPOOL_AGENT_CONF=listen:0.0.0.0:9477 ./any_cuda_program
 *
 * The driver loads the library during the program's first cuInit and calls
 * InitializeInjection. It starts the agent once, with GPUPOOL_AGENT_CONF for
 * its options (CUPTI auto by default), and never fails the program: a failure
 * is one line on stderr and the program runs on. We are inside cuInit here,
 * so nothing on this call stack may call the driver: cuda_driver_mark_injected
 * makes the agent defer its driver calls to its own threads.
 *
 * Without a CUDA driver (no libcuda.so.1) nothing ever loads this library:
 * CUDA_INJECTION64_PATH is read by the driver, and the program's own CUDA
 * error is the only sign. Loaded some other way while CUDA_INJECTION64_PATH
 * asks for injection (LD_PRELOAD, to check a setup: docs/cupti.md), it says
 * in one line why no agent will start. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/cuda_driver.h"
#include "gpupool/agent.h"

/* Inside the driver's cuInit, libcuda.so.1 is loaded already and the
 * check costs one dlopen of it (no driver call). */
__attribute__((constructor)) static void say_why_without_driver(void) {
  const char *why = NULL;
  if (getenv("CUDA_INJECTION64_PATH") && !cuda_driver_load(&why))
    fprintf(stderr,
            "gpupool inject: the agent will not start: %s (the driver loads "
            "CUDA_INJECTION64_PATH inside cuInit: without one, nothing calls "
            "InitializeInjection)\n",
            why ? why : "no CUDA driver");
}

int InitializeInjection(void) {
  static atomic_int started;
  if (atomic_exchange(&started, 1))
    return 1;
  cuda_driver_mark_injected();
  gpupool_status s = gpupool_agent_start(NULL);
  if (s != GPUPOOL_OK)
    fprintf(stderr, "gpupool inject: agent not started: %s (%s)\n", gpupool_status_string(s),
            gpupool_last_error());
  return 1;
}
