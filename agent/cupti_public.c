/* The public hand-over of CUPTI (include/gpupool/agent.h). */
#include "cupti.h"
#include "gpupool/agent.h"

gpupool_status gpupool_agent_cupti_release(void) {
  cupti_handover();
  return GPUPOOL_OK;
}

gpupool_status gpupool_agent_cupti_acquire(void) {
  /* FORCE: a failure to take CUPTI back is the caller's answer. */
  return cupti_start(GPUPOOL_CUPTI_FORCE);
}
