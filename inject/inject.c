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
 * makes the agent defer its driver calls to its own threads. */
#include <stdatomic.h>
#include <stdio.h>

#include "agent/cuda_driver.h"
#include "gpupool/agent.h"

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
