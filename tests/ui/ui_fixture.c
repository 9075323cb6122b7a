/* ui_fixture: pools in a known, frozen state for the /ui browser test
 * (tests/e2e/ui_browser.sh), on the host backend, with the agent serving.
 *
 *   ui_fixture N     pool "frag" gets at least N blocks (e.g. 100000)
 *   ui_fixture empty the agent with no pool
 *
 * Pools: "steady" (segments of 2, 20, 14 and 30 MiB; one block pending on
 * another stream; blocks allocated under the tags "weights", "activations"
 * and "kv_cache", one untagged), "frag" (N blocks, allocated and free
 * alternating), "empty" (no allocation), "expandable"
 * (expandable_segments:True with unmapped pages in a free block) and "oom"
 * (a 64 MiB simulated device: one OOM, reported by the agent at /oom/1);
 * empty pools "same", "same", "same" and "same#2" (labelled same, same#2,
 * same#3, same#2#2), "rtl<U+202E>name" (a bidi control in its name), and
 * "twin" on device 0 (one segment) and on device 1 (two): one label on two
 * devices, which ?pool= and ?device= tell apart.
 * Nothing changes after setup, so every number the page shows equals
 * /metrics'. Prints "port P" once serving, then reads
 * commands on stdin: "destroy NAME" (answers "destroyed NAME"), "quit" or
 * end of input stops it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/agent.h"
#include "gpupool/gpupool.h"
#include "gpupool/host.h"
#include "gpupool/tag.h"

#define POOLS 12

static gpupool *make_on(const char *name, const char *tunables, size_t capacity, int device) {
  gpupool_options o = {.name = name,
                       .tunables = tunables,
                       .host_capacity = capacity,
                       .device = device,
                       .backend = GPUPOOL_BACKEND_HOST,
                       .ignore_env = 1};
  gpupool *p;
  if (gpupool_create(&o, &p) != GPUPOOL_OK) {
    fprintf(stderr, "ui_fixture: pool %s: %s\n", name, gpupool_last_error());
    exit(1);
  }
  return p;
}

static gpupool *make(const char *name, const char *tunables, size_t capacity) {
  return make_on(name, tunables, capacity, 0);
}

static void tag(const char *name) {
  if (gpupool_tag_push(name) != GPUPOOL_OK) {
    fprintf(stderr, "ui_fixture: tag %s: %s\n", name, gpupool_last_error());
    exit(1);
  }
}

static void *alloc(gpupool *p, size_t size, void *stream) {
  void *ptr;
  if (gpupool_malloc(p, &ptr, size, stream) != GPUPOOL_OK) {
    fprintf(stderr, "ui_fixture: malloc %zu: %s\n", size, gpupool_last_error());
    exit(1);
  }
  return ptr;
}

/* Prints the port, then serves the commands of stdin until "quit". */
static void serve(gpupool **pools, const char *const *names) {
  printf("port %d\n", gpupool_agent_port());
  fflush(stdout);
  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = '\0';
    if (strcmp(line, "quit") == 0)
      break;
    if (strncmp(line, "destroy ", 8) == 0)
      for (int i = 0; i < POOLS && pools; i++)
        if (pools[i] && strcmp(names[i], line + 8) == 0) {
          gpupool_destroy(pools[i]);
          pools[i] = NULL;
          printf("destroyed %s\n", names[i]);
          fflush(stdout);
        }
  }
  gpupool_agent_stop();
}

int main(int argc, char **argv) {
  int no_pool = argc == 2 && strcmp(argv[1], "empty") == 0;
  long n = argc > 1 ? strtol(argv[1], NULL, 10) : 0;
  if (argc != 2 || (!no_pool && (n < 2 || n > 10000000))) {
    fprintf(stderr, "usage: ui_fixture BLOCKS (2 to 10^7) | empty\n");
    return 2;
  }
  if (gpupool_agent_start(NULL) != GPUPOOL_OK) {
    fprintf(stderr, "ui_fixture: the agent did not start: %s\n", gpupool_last_error());
    return 1;
  }
  if (no_pool) {
    serve(NULL, NULL);
    return 0;
  }
  const char *names[POOLS] = {"steady", "frag", "empty",  "expandable",          "oom",  "same",
                              "same",   "same", "same#2", "rtl\xe2\x80\xaename", "twin", "twin"};
  const size_t big = (size_t)4 << 30;
  gpupool *pools[POOLS];
  pools[0] = make(names[0], NULL, big);
  pools[1] = make(names[1], NULL, big);
  pools[2] = make(names[2], NULL, big);
  pools[3] = make(names[3],
                  "expandable_segments:True,expandable_slack_percent:0,memory_fraction:0.5", big);
  pools[4] = make(names[4], NULL, (size_t)64 << 20);
  for (int i = 5; i < 10; i++)
    pools[i] = make(names[i], NULL, big);
  /* twin: one label on two devices, one segment on device 0 and two on 1 */
  pools[10] = make_on(names[10], NULL, big, 0);
  pools[11] = make_on(names[11], NULL, big, 1);
  alloc(pools[10], 1 << 20, NULL);
  alloc(pools[11], 1 << 20, NULL);
  alloc(pools[11], 30 << 20, NULL);

  /* steady: a small segment (2 MiB) with a freed block between two live
   * ones, a 20 MiB segment, a 14 MiB and a 30 MiB one; a block freed after
   * use on another stream stays pending. Tags: weights 100 KiB + 3 MiB,
   * activations 14 MiB (and the pending block), kv_cache 30 MiB; the
   * 300 KiB block has none. */
  gpupool_host_stream *other = gpupool_host_stream_create();
  tag("weights");
  void *a = alloc(pools[0], 100 << 10, NULL);
  void *b = alloc(pools[0], 200 << 10, NULL);
  gpupool_tag_pop();
  alloc(pools[0], 300 << 10, NULL);
  gpupool_free(pools[0], b);
  (void)a;
  tag("activations");
  void *c = alloc(pools[0], 5 << 20, NULL);
  gpupool_tag_pop();
  tag("weights");
  alloc(pools[0], 3 << 20, NULL);
  gpupool_tag_pop();
  tag("activations");
  alloc(pools[0], 14 << 20, NULL);
  gpupool_tag_pop();
  tag("kv_cache");
  alloc(pools[0], 30 << 20, NULL);
  gpupool_tag_pop();
  gpupool_record_stream(pools[0], c, other);
  gpupool_host_stream_enqueue(other);
  gpupool_free(pools[0], c);

  /* frag: n allocations and a few more (a segment's last free block may
   * absorb a freed neighbour), every other one freed: no two free blocks
   * adjoin. */
  long total = n + n / 50 + 2;
  void **ptrs = malloc((size_t)total * sizeof *ptrs);
  if (!ptrs)
    return 1;
  uint64_t x = 88172645463325252ull;
  for (long i = 0; i < total; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    ptrs[i] = alloc(pools[1], 512 * (1 + x % 8), NULL);
  }
  for (long i = 0; i < total; i += 2)
    gpupool_free(pools[1], ptrs[i]);
  free(ptrs);

  /* expandable: a 40 MiB segment split into free 10 MiB | allocated 10 MiB |
   * free 20 MiB, the idle pages returned: the free blocks have unmapped
   * pages. */
  gpupool_free(pools[3], alloc(pools[3], 40 << 20, NULL));
  void *e = alloc(pools[3], 10 << 20, NULL);
  alloc(pools[3], 10 << 20, NULL);
  gpupool_free(pools[3], e);
  gpupool_empty_cache(pools[3]);

  /* oom: 40 MiB of 64 held, then 40 MiB more cannot fit. */
  alloc(pools[4], 40 << 20, NULL);
  void *no;
  if (gpupool_malloc(pools[4], &no, 40 << 20, NULL) != GPUPOOL_ERR_OOM ||
      strncmp(gpupool_last_error(), "CUDA out of memory.", 19) != 0) {
    fprintf(stderr, "ui_fixture: expected an OOM, got: %s\n", gpupool_last_error());
    return 1;
  }

  serve(pools, names);
  gpupool_host_stream_complete(other);
  for (int i = 0; i < POOLS; i++)
    gpupool_destroy(pools[i]);
  gpupool_host_stream_destroy(other);
  return 0;
}
