/* /ui on a real GPU: the agent's CUPTI history reaches the page's data.
 * A cudaMalloc outside every pool must show up in /ui/state.json as
 * "other" CUDA memory of device 0 and a pool on the cuda backend as "pool"
 * memory, within a bounded wait (the sampler's interval plus CUPTI's flush).
 * Run: ctest -L gpu -R ui, or build/tests/gpu/gpu_test_ui_gpu --verbose. */
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "gpu_check.h"
#include "gpupool/agent.h"
#include "gpupool/gpupool.h"
#include "helpers/http_client.h"

#define MiB ((size_t)1 << 20)

/* The newest value of series `name` of device 0 in cupti.devices, or -1. */
static double last_of(cJSON *state, const char *name) {
  cJSON *d;
  cJSON_ArrayForEach(d, cJSON_GetObjectItem(cJSON_GetObjectItem(state, "cupti"), "devices")) {
    if (cJSON_GetObjectItem(d, "device")->valueint != 0)
      continue;
    cJSON *s = cJSON_GetObjectItem(d, name);
    int n = cJSON_GetArraySize(s);
    return n ? cJSON_GetArrayItem(s, n - 1)->valuedouble : -1;
  }
  return -1;
}

Test(ui_gpu, cupti_history_in_state_json) {
  gpu_require("/ui CUPTI history");
  unsetenv("GPUPOOL_AGENT_CONF");
  gpupool_agent_options ao = {.listen = "127.0.0.1:0",
                              .cupti = GPUPOOL_CUPTI_FORCE,
                              .sample_interval_ms = 100,
                              .ignore_env = 1};
  cr_assert_eq(gpupool_agent_start(&ao), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_options po = {.name = "ui-gpu", .backend = GPUPOOL_BACKEND_CUDA, .ignore_env = 1};
  gpupool *pool;
  cr_assert_eq(gpupool_create(&po, &pool), GPUPOOL_OK, "%s", gpupool_last_error());
  void *in_pool, *outside;
  cr_assert_eq(gpupool_malloc(pool, &in_pool, 32 * MiB, NULL), GPUPOOL_OK);
  CUDA_OK(cudaMalloc(&outside, 64 * MiB));

  int port = gpupool_agent_port();
  double other = -1, in = -1;
  int up = 0;
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    http_response r;
    cr_assert_eq(http_request("127.0.0.1", port, "GET", "/ui/state.json?window=60", NULL, &r), 0);
    cr_assert_eq(r.status, 200, "%s", r.body);
    cJSON *st = cJSON_Parse(r.body);
    cr_assert_not_null(st);
    up = cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(st, "cupti"), "up"));
    other = last_of(st, "other");
    in = last_of(st, "pool");
    cJSON_Delete(st);
    http_response_free(&r);
    if (up && other >= 64.0 * MiB && in >= 32.0 * MiB)
      break;
    usleep(100 * 1000);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while (t.tv_sec - t0.tv_sec < 20);
  fprintf(stderr, "[gpu] /ui/state.json: cupti up %d, device 0 other %.0f B, pool %.0f B\n", up,
          other, in);
  cr_assert(up, "CUPTI recording");
  cr_assert_geq(other, 64.0 * MiB, "the cudaMalloc outside the pool is other CUDA memory");
  cr_assert_geq(in, 32.0 * MiB, "the pool's segment is pool memory");

  CUDA_OK(cudaFree(outside));
  gpupool_free(pool, in_pool);
  gpupool_agent_stop();
  gpupool_destroy(pool);
}
