/* libFuzzer target: the two configuration strings a user sets in the
 * environment. The first byte chooses: even, GPUPOOL_CONF
 * (gpupool_conf_check, and where it passes a host-backend pool created from
 * it that allocates, frees and empties its cache); odd, GPUPOOL_AGENT_CONF
 * (gpupool_agent_conf_check). The rest is the string. */
#include <gpupool/agent.h>
#include <gpupool/gpupool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void use_pool(gpupool_options *o) {
  gpupool *p;
  if (gpupool_create(o, &p) != GPUPOOL_OK)
    return;
  void *a = NULL, *b = NULL;
  (void)gpupool_malloc(p, &a, 3 << 20, NULL);
  (void)gpupool_malloc(p, &b, 1000, NULL);
  (void)gpupool_free(p, a);
  (void)gpupool_free(p, b);
  (void)gpupool_empty_cache(p);
  gpupool_destroy(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  char *s = malloc(size);
  if (!s)
    abort();
  memcpy(s, data + 1, size - 1);
  s[size - 1] = '\0';
  if (data[0] & 1) {
    (void)gpupool_agent_conf_check(s);
  } else {
    gpupool_options o = {
        .backend = GPUPOOL_BACKEND_HOST, .host_capacity = (size_t)1 << 30, .ignore_env = 1};
    if (gpupool_conf_check(&o, s) == GPUPOOL_OK) {
      o.tunables = s;
      use_pool(&o);
    }
  }
  free(s);
  return 0;
}
