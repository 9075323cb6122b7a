/* Every bad call returns a clear status, says why in gpupool_last_error(),
 * and changes nothing; bad GPUPOOL_CONF strings and tunables are refused
 * naming the key; GPUPOOL_CONF applies over options unless ignore_env. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers/pool_check.h"

#define MiB PC_MiB
#define A   GPUPOOL_STAT_ALL

static const gpupool_strategy strategies[] = {GPUPOOL_STRATEGY_BFC, GPUPOOL_STRATEGY_ROUND,
                                              GPUPOOL_STRATEGY_NAIVE};

static void expect_reason(const char *call) {
  const char *e = gpupool_last_error();
  cr_expect(e != NULL && e[0] != '\0', "%s: gpupool_last_error() is empty", call);
}

static void expect_same_stats(gpupool *p, const gpupool_stats *before, const char *call) {
  gpupool_stats after = pc_stats(p);
  cr_expect_eq(memcmp(before, &after, sizeof after), 0, "%s changed the stats", call);
}

Test(pool_badinput, null_pool_and_null_out_pointers) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  gpupool_stats before = pc_stats(p);
  void *ptr = (void *)0x1;
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};

  cr_expect_eq(gpupool_create(&o, NULL), GPUPOOL_ERR_INVALID);
  expect_reason("gpupool_create(opt, NULL)");
  cr_expect_eq(gpupool_create(NULL, NULL), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_malloc(NULL, &ptr, 64, NULL), GPUPOOL_ERR_INVALID);
  expect_reason("gpupool_malloc(NULL pool)");
  cr_expect_eq(ptr, (void *)0x1, "a refused malloc must not write *ptr");
  cr_expect_eq(gpupool_malloc(p, NULL, 64, NULL), GPUPOOL_ERR_INVALID);
  expect_reason("gpupool_malloc(NULL ptr)");
  cr_expect_eq(gpupool_free(NULL, ptr), GPUPOOL_ERR_INVALID);
  expect_reason("gpupool_free(NULL pool)");
  cr_expect_eq(gpupool_record_stream(NULL, ptr, NULL), GPUPOOL_ERR_INVALID);
  expect_reason("gpupool_record_stream(NULL pool)");
  gpupool_stats s;
  cr_expect_eq(gpupool_get_stats(NULL, &s), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_get_stats(p, NULL), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_empty_cache(NULL), 0);
  gpupool_destroy(NULL);
  gpupool_reset_peak_stats(NULL);
  gpupool_reset_accumulated_stats(NULL);
  expect_same_stats(p, &before, "the NULL calls");
  gpupool_destroy(p);
}

/* Calls that return no status still say why they did nothing: an older,
 * unrelated reason must not stay in gpupool_last_error(). */
Test(pool_badinput, null_pool_calls_without_a_status_set_the_last_error) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *ptr = NULL;
  static const char *const calls[] = {"gpupool_empty_cache", "gpupool_reset_peak_stats",
                                      "gpupool_reset_accumulated_stats"};
  for (int i = 0; i < 3; i++) {
    cr_assert_eq(gpupool_malloc(p, &ptr, 0, NULL), GPUPOOL_ERR_INVALID); /* an older reason */
    if (i == 0)
      cr_expect_eq(gpupool_empty_cache(NULL), 0);
    else if (i == 1)
      gpupool_reset_peak_stats(NULL);
    else
      gpupool_reset_accumulated_stats(NULL);
    char want[64];
    snprintf(want, sizeof want, "%s: pool is NULL", calls[i]);
    cr_expect_str_eq(gpupool_last_error(), want);
  }
  gpupool_destroy(p);
}

Test(pool_badinput, free_of_null_is_a_no_op) {
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x;
  cr_assert_eq(gpupool_malloc(p, &x, 100, NULL), GPUPOOL_OK);
  gpupool_stats before = pc_stats(p);
  cr_expect_eq(gpupool_free(p, NULL), GPUPOOL_OK);
  gpupool_stats after = pc_stats(p);
  cr_expect_eq(after.allocation[A].current, before.allocation[A].current);
  cr_expect_eq(after.allocation[A].freed, before.allocation[A].freed);
  cr_expect_eq(after.num_frees, before.num_frees, "free(NULL) is not a free");
  gpupool_destroy(p);
}

Test(pool_badinput, bad_sizes) {
  static const size_t bad[] = {0, ((size_t)1 << 48) + 1, (size_t)1 << 60, SIZE_MAX, SIZE_MAX - 511};
  for (int k = 0; k < 3; k++) {
    gpupool *p = pc_pool(strategies[k], 0, NULL);
    void *keep;
    cr_assert_eq(gpupool_malloc(p, &keep, 4096, NULL), GPUPOOL_OK);
    gpupool_stats before = pc_stats(p);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      void *ptr = (void *)0x1;
      cr_expect_eq(gpupool_malloc(p, &ptr, bad[i], NULL), GPUPOOL_ERR_INVALID,
                   "strategy %d, size %zu", strategies[k], bad[i]);
      expect_reason("gpupool_malloc(bad size)");
      cr_expect_eq(ptr, (void *)0x1, "size %zu: *ptr written", bad[i]);
    }
    expect_same_stats(p, &before, "a bad size");
    /* 2^48 itself is a valid request: the 8 GiB simulated device cannot hold it */
    void *ptr = NULL;
    cr_expect_eq(gpupool_malloc(p, &ptr, (size_t)1 << 48, NULL), GPUPOOL_ERR_OOM);
    gpupool_stats s = pc_stats(p);
    cr_expect_eq(s.num_ooms, 1);
    cr_expect_eq(s.allocation[A].current, 1);
    cr_expect_eq(gpupool_free(p, keep), GPUPOOL_OK);
    gpupool_destroy(p);
  }
}

Test(pool_badinput, frees_of_pointers_the_pool_does_not_own) {
  for (int k = 0; k < 3; k++) {
    gpupool *p = pc_pool(strategies[k], 0, NULL);
    gpupool *other = pc_pool(strategies[k], 0, NULL);
    void *x, *y, *gone, *theirs;
    cr_assert_eq(gpupool_malloc(p, &x, 8192, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_malloc(p, &y, 8192, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_malloc(p, &gone, 8192, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_malloc(other, &theirs, 8192, NULL), GPUPOOL_OK);
    cr_assert_eq(gpupool_free(p, gone), GPUPOOL_OK);
    pc_pattern_fill(x, 8192, 1);
    pc_pattern_fill(y, 8192, 2);
    void *heap = malloc(8192);
    int on_stack;
    struct {
      const char *what;
      void *ptr;
    } bad[] = {
        {"a double free", gone},
        {"a malloc'd pointer", heap},
        {"a stack address", &on_stack},
        {"an interior pointer (+1)", (char *)x + 1},
        {"an interior pointer (+512)", (char *)x + 512},
        {"the last byte", (char *)y + 8191},
        {"another pool's pointer", theirs},
        {"a small integer", (void *)0x1000},
    };
    gpupool_stats before = pc_stats(p), before_other = pc_stats(other);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      cr_expect_eq(gpupool_free(p, bad[i].ptr), GPUPOOL_ERR_INVALID, "strategy %d: %s",
                   strategies[k], bad[i].what);
      expect_reason(bad[i].what);
    }
    expect_same_stats(p, &before, "a bad free");
    expect_same_stats(other, &before_other, "a bad free in another pool");
    cr_expect_eq(pc_pattern_check(x, 8192, 1), SIZE_MAX, "a bad free touched a live block");
    cr_expect_eq(pc_pattern_check(y, 8192, 2), SIZE_MAX, "a bad free touched a live block");
    /* the real ones still work */
    cr_expect_eq(gpupool_free(p, x), GPUPOOL_OK);
    cr_expect_eq(gpupool_free(p, y), GPUPOOL_OK);
    cr_expect_eq(gpupool_free(other, theirs), GPUPOOL_OK);
    cr_expect_eq(gpupool_free(p, x), GPUPOOL_ERR_INVALID, "double free after a good free");
    char msg[256];
    gpupool_stats s = pc_stats(p);
    cr_expect_eq(pc_check_invariants(&s, strategies[k], 0, msg, sizeof msg), 0, "%s", msg);
    cr_expect_eq(s.allocation[A].current, 0);
    free(heap);
    gpupool_destroy(p);
    gpupool_destroy(other);
  }
}

/* The live-allocation map marks freed slots with the key 1 and empty ones
 * with 0: the addresses 1 and 0 must never match them. */
Test(pool_badinput, frees_of_the_map_marker_addresses_are_refused) {
  for (int k = 0; k < 3; k++) {
    gpupool *p = pc_pool(strategies[k], 0, NULL);
    void *x[64];
    for (int i = 0; i < 64; i++)
      cr_assert_eq(gpupool_malloc(p, &x[i], 4096, NULL), GPUPOOL_OK);
    for (int i = 0; i < 64; i++)
      cr_assert_eq(gpupool_free(p, x[i]), GPUPOOL_OK);
    gpupool_stats before = pc_stats(p);
    cr_expect_eq(gpupool_free(p, (void *)1), GPUPOOL_ERR_INVALID, "strategy %d", strategies[k]);
    expect_reason("gpupool_free(1)");
    cr_expect_eq(gpupool_record_stream(p, (void *)1, NULL), GPUPOOL_ERR_INVALID);
    expect_reason("gpupool_record_stream(1)");
    expect_same_stats(p, &before, "a free of address 1");
    gpupool_destroy(p);
  }
}

Test(pool_badinput, bfc_free_of_a_cached_block_address_is_refused) {
  /* y's block merged into the segment's free tail: its address is not live */
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  void *x, *y;
  cr_assert_eq(gpupool_malloc(p, &x, 512, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_malloc(p, &y, 512, NULL), GPUPOOL_OK);
  cr_assert_eq(gpupool_free(p, y), GPUPOOL_OK);
  gpupool_stats before = pc_stats(p);
  cr_expect_eq(gpupool_free(p, y), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_free(p, (char *)x + 1024), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_record_stream(p, y, NULL), GPUPOOL_ERR_INVALID);
  expect_same_stats(p, &before, "a free of a cached address");
  gpupool_destroy(p);
}

/* --- configuration strings ----------------------------------------------- */

typedef struct bad_conf {
  const char *conf;
  const char *names; /* a word the reason must contain; NULL: any reason */
} bad_conf;

static const bad_conf bad_confs[] = {
    {"foo:1", "foo"},
    {"strategy:round,max_spilt_size_mb:64", "max_spilt_size_mb"},
    {"backend:gpu", "backend"},
    {"backend:HOST", "backend"},
    {"strategy:best", "strategy"},
    {"device:abc", "device"},
    {"device:-1", "device"},
    {"device:1x", "device"},
    {"host_capacity_mb:0", "host_capacity_mb"},
    {"host_capacity_mb:-5", "host_capacity_mb"},
    {"host_capacity_mb:abc", "host_capacity_mb"},
    {"host_capacity_mb:1.5", "host_capacity_mb"},
    {"max_split_size_mb:19", "max_split_size_mb"},
    {"max_split_size_mb:0", "max_split_size_mb"},
    {"max_split_size_mb:-1", "max_split_size_mb"},
    {"max_split_size_mb:big", "max_split_size_mb"},
    {"max_non_split_rounding_mb:-1", "max_non_split_rounding_mb"},
    {"max_non_split_rounding_mb:x", "max_non_split_rounding_mb"},
    {"roundup_power2_divisions:3", "roundup_power2_divisions"},
    {"roundup_power2_divisions:128", "roundup_power2_divisions"},
    {"roundup_power2_divisions:-2", "roundup_power2_divisions"},
    {"roundup_power2_divisions:x", "roundup_power2_divisions"},
    {"garbage_collection_threshold:0", "garbage_collection_threshold"},
    {"garbage_collection_threshold:1", "garbage_collection_threshold"},
    {"garbage_collection_threshold:1.5", "garbage_collection_threshold"},
    {"garbage_collection_threshold:-0.1", "garbage_collection_threshold"},
    {"garbage_collection_threshold:x", "garbage_collection_threshold"},
    {"garbage_collection_threshold:1e", "garbage_collection_threshold"},
    {"garbage_collection_threshold:1e+", "garbage_collection_threshold"},
    {"garbage_collection_threshold:.e-1", "garbage_collection_threshold"},
    {"garbage_collection_threshold:inf", "garbage_collection_threshold"},
    {"garbage_collection_threshold:nan", "garbage_collection_threshold"},
    {"garbage_collection_threshold:0x0.8p0", "garbage_collection_threshold"},
    {"garbage_collection_threshold:5e-1x", "garbage_collection_threshold"},
    {"garbage_collection_threshold:1e400", "garbage_collection_threshold"},
    {"reserve_percent:51", "reserve_percent"},
    {"reserve_percent:-1", "reserve_percent"},
    {"reserve_percent:x", "reserve_percent"},
    {"round_linear_cutoff:11", "round_linear_cutoff"},
    {"round_linear_cutoff:41", "round_linear_cutoff"},
    {"round_linear_cutoff:x", "round_linear_cutoff"},
    {"fault_every_n:-1", "fault_every_n"},
    {"fault_every_n:x", "fault_every_n"},
    {"fault_rate:1.5", "fault_rate"},
    {"fault_rate:-0.1", "fault_rate"},
    {"fault_rate:x", "fault_rate"},
    {"fault_seed:x", "fault_seed"},
    {"strategy:round,reserve_percent:99", "reserve_percent"}, /* a bad pair after a good one */
    /* malformed */
    {"strategy", "strategy"},
    {"strategy:", "strategy"},
    {":1", NULL},
    {"strategy:bfc,,name:x", "stray ','"},
    {"strategy:bfc,,", "stray ','"}, /* one trailing ',' is allowed (below), not two */
    {"strategy:bfc, ,", "stray ','"},
    {",strategy:bfc", "stray ','"},
    {" , ", "stray ','"},
    {"strategy:bfc,bogus", "bogus"},
    {",", "stray ','"},
};
#define N_BAD_CONFS (sizeof bad_confs / sizeof bad_confs[0])

static void expect_refused(gpupool_status st, gpupool *out, const bad_conf *b, const char *via) {
  cr_expect_eq(st, GPUPOOL_ERR_INVALID, "%s \"%s\" was accepted", via, b->conf);
  cr_expect_null(out, "%s \"%s\": *out set", via, b->conf);
  const char *e = gpupool_last_error();
  cr_expect(e[0] != '\0', "%s \"%s\": no reason", via, b->conf);
  if (b->names)
    cr_expect(strstr(e, b->names) != NULL, "%s \"%s\": reason \"%s\" does not name '%s'", via,
              b->conf, e, b->names);
  if (out)
    gpupool_destroy(out);
}

Test(pool_badinput, bad_tunables_are_refused_naming_the_key) {
  for (size_t i = 0; i < N_BAD_CONFS; i++) {
    gpupool_options o = {
        .backend = GPUPOOL_BACKEND_HOST, .tunables = bad_confs[i].conf, .ignore_env = 1};
    gpupool *p = NULL;
    expect_refused(gpupool_create(&o, &p), p, &bad_confs[i], "tunables");
  }
}

Test(pool_badinput, bad_gpupool_conf_is_refused_naming_the_key, .init = cr_redirect_stderr) {
  for (size_t i = 0; i < N_BAD_CONFS; i++) {
    setenv("GPUPOOL_CONF", bad_confs[i].conf, 1);
    gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST};
    gpupool *p = NULL;
    expect_refused(gpupool_create(&o, &p), p, &bad_confs[i], "GPUPOOL_CONF");
    p = NULL;
    expect_refused(gpupool_create(NULL, &p), p, &bad_confs[i], "GPUPOOL_CONF (NULL options)");
  }
  unsetenv("GPUPOOL_CONF");
  /* The library prints nothing (the caller prints gpupool_last_error() once). */
  fflush(stderr);
  FILE *f = cr_get_redirected_stderr();
  int c = fgetc(f);
  cr_expect_eq(c, EOF, "the library printed to stderr");
}

Test(pool_badinput, ignore_env_skips_a_bad_gpupool_conf) {
  setenv("GPUPOOL_CONF", "this is not a conf", 1);
  gpupool *p = pc_pool(GPUPOOL_STRATEGY_BFC, 0, NULL);
  gpupool_destroy(p);
  unsetenv("GPUPOOL_CONF");
}

Test(pool_badinput, edge_values_are_accepted) {
  static const char *const good[] = {
      "max_split_size_mb:21",
      "max_split_size_mb:inf",
      "max_non_split_rounding_mb:0",
      "roundup_power2_divisions:0",
      "roundup_power2_divisions:1",
      "roundup_power2_divisions:64",
      "garbage_collection_threshold:0.01",
      "garbage_collection_threshold:0.99",
      "garbage_collection_threshold:1e-3", /* an exponent, as PyTorch's stod reads it */
      "garbage_collection_threshold:5E-1",
      "garbage_collection_threshold:.5e+0",
      "garbage_collection_threshold:1.e-1",
      "reserve_percent:0",
      "reserve_percent:50",
      "round_linear_cutoff:12",
      "round_linear_cutoff:40",
      "fault_rate:0",
      "fault_rate:1",
      "fault_every_n:0",
      "fault_seed:18446744073709551615",
      "device:0",
      "name:a",
      "host_capacity_mb:1",
      "",
      " strategy : round , name : spaced ",
      "backend:host,strategy:naive,device:0,name:n,host_capacity_mb:64",
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST, .tunables = good[i], .ignore_env = 1};
    gpupool *p = NULL;
    gpupool_status st = gpupool_create(&o, &p);
    cr_expect_eq(st, GPUPOOL_OK, "\"%s\" refused: %s", good[i], gpupool_last_error());
    if (p)
      gpupool_destroy(p);
  }
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST,
                       .tunables = " strategy : round , name : spaced ",
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK);
  cr_expect_str_eq(gpupool_strategy_name(p), "round");
  cr_expect_str_eq(gpupool_name(p), "spaced");
  gpupool_destroy(p);
}

Test(pool_badinput, bad_options_are_refused) {
  char long_name[300];
  memset(long_name, 'n', sizeof long_name - 1);
  long_name[sizeof long_name - 1] = '\0';
  gpupool_options base = {.backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};
  gpupool_options bad[5];
  for (int i = 0; i < 5; i++)
    bad[i] = base;
  bad[0].strategy = (gpupool_strategy)99;
  bad[1].backend = (gpupool_backend)99;
  bad[2].device = -1;
  bad[3].name = "";
  bad[4].name = long_name;
  for (int i = 0; i < 5; i++) {
    gpupool *p = (gpupool *)0x1;
    cr_expect_eq(gpupool_create(&bad[i], &p), GPUPOOL_ERR_INVALID, "bad option %d", i);
    cr_expect_null(p, "bad option %d", i);
    expect_reason("gpupool_create(bad option)");
  }
}

Test(pool_badinput, a_cuda_pool_without_a_gpu_is_unsupported_not_invalid) {
  gpupool_options o = {.backend = GPUPOOL_BACKEND_CUDA, .ignore_env = 1};
  gpupool *p = NULL;
  gpupool_status st = gpupool_create(&o, &p);
  if (st == GPUPOOL_OK) {
    /* a GPU is present: host fault injection does not apply to it */
    cr_expect_eq(gpupool_host_inject_faults(p, 1, 0, 0), GPUPOOL_ERR_UNSUPPORTED);
    gpupool_destroy(p);
    return;
  }
  cr_expect_eq(st, GPUPOOL_ERR_UNSUPPORTED, "%s", gpupool_status_string(st));
  cr_expect_null(p);
  expect_reason("gpupool_create(cuda, no GPU)");
  /* host-only tunables on a non-host pool are a configuration error */
  o.tunables = "fault_every_n:3";
  cr_expect_eq(gpupool_create(&o, &p), GPUPOOL_ERR_INVALID);
}

/* The fault_* keys belong to the host backend: on any other, even with
 * values that inject nothing, they are refused (as documented) rather than
 * ignored, from the tunables and from GPUPOOL_CONF alike. */
Test(pool_badinput, fault_keys_on_another_backend_are_refused) {
  static const char *const keys[] = {"fault_seed:3", "fault_every_n:0", "fault_rate:0",
                                     "fault_every_n:2", "fault_rate:0.5"};
  static const gpupool_backend others[] = {GPUPOOL_BACKEND_SIM, GPUPOOL_BACKEND_CUDA,
                                           GPUPOOL_BACKEND_CUDA_ASYNC};
  for (size_t b = 0; b < sizeof others / sizeof others[0]; b++)
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
      for (int env = 0; env < 2; env++) {
        gpupool_options o = {.backend = others[b], .host_capacity = 64 * MiB};
        if (env) {
          setenv("GPUPOOL_CONF", keys[k], 1);
        } else {
          o.tunables = keys[k];
          o.ignore_env = 1;
        }
        gpupool *p = (gpupool *)0x1;
        gpupool_status st = gpupool_create(&o, &p);
        unsetenv("GPUPOOL_CONF");
        cr_expect_eq(st, GPUPOOL_ERR_INVALID, "backend %d, %s \"%s\": %s", others[b],
                     env ? "GPUPOOL_CONF" : "tunables", keys[k], gpupool_status_string(st));
        cr_expect_null(p);
        cr_expect(strstr(gpupool_last_error(), "needs backend host"), "reason: %s",
                  gpupool_last_error());
        if (st == GPUPOOL_OK)
          gpupool_destroy(p);
      }
    }
  /* backend sim from GPUPOOL_CONF over a host pool's fault_seed tunable */
  setenv("GPUPOOL_CONF", "backend:sim", 1);
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST, .tunables = "fault_seed:3"};
  gpupool *p = NULL;
  cr_expect_eq(gpupool_create(&o, &p), GPUPOOL_ERR_INVALID, "%s", gpupool_last_error());
  unsetenv("GPUPOOL_CONF");
  cr_expect_null(p);
  if (p)
    gpupool_destroy(p);
}

/* --- environment over options --------------------------------------------- */

Test(pool_badinput, gpupool_conf_applies_over_options_and_tunables) {
  gpupool_options o = {.name = "opt",
                       .backend = GPUPOOL_BACKEND_HOST,
                       .strategy = GPUPOOL_STRATEGY_BFC,
                       .tunables = "strategy:round,name:tun"};
  gpupool *p = NULL;
  unsetenv("GPUPOOL_CONF");
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_str_eq(gpupool_strategy_name(p), "round", "tunables apply over the fields");
  cr_expect_str_eq(gpupool_name(p), "tun");
  gpupool_destroy(p);

  setenv("GPUPOOL_CONF", "strategy:naive,name:env", 1);
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_str_eq(gpupool_strategy_name(p), "naive", "GPUPOOL_CONF applies over tunables");
  cr_expect_str_eq(gpupool_name(p), "env");
  gpupool_destroy(p);

  o.ignore_env = 1;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK);
  cr_expect_str_eq(gpupool_strategy_name(p), "round", "ignore_env");
  cr_expect_str_eq(gpupool_name(p), "tun");
  gpupool_destroy(p);

  o.tunables = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK);
  cr_expect_str_eq(gpupool_strategy_name(p), "bfc");
  cr_expect_str_eq(gpupool_name(p), "opt");
  gpupool_destroy(p);
  unsetenv("GPUPOOL_CONF");
}

/* A key given twice in one string: the last one wins, as in PyTorch's
 * parser (each key overwrites its setting); across strings, GPUPOOL_CONF
 * wins over the tunables. */
Test(pool_badinput, a_key_given_twice_takes_the_last_value) {
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST,
                       .tunables = "strategy:bfc,name:first,strategy:round,name:last",
                       .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_str_eq(gpupool_strategy_name(p), "round");
  cr_expect_str_eq(gpupool_name(p), "last");
  gpupool_destroy(p);
  o.tunables = NULL;
  o.ignore_env = 0;
  setenv("GPUPOOL_CONF", "strategy:round,strategy:naive", 1);
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  unsetenv("GPUPOOL_CONF");
  cr_expect_str_eq(gpupool_strategy_name(p), "naive");
  gpupool_destroy(p);
}

/* One trailing ',' (white space may follow) ends the list, as PyTorch's
 * parser reads PYTORCH_CUDA_ALLOC_CONF; in the tunables and in GPUPOOL_CONF. */
Test(pool_badinput, a_trailing_comma_is_allowed) {
  static const char *const confs[] = {"expandable_segments:True,", "strategy:round,",
                                      "max_split_size_mb:128,strategy:round, \t"};
  for (size_t i = 0; i < sizeof confs / sizeof *confs; i++) {
    gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST, .tunables = confs[i], .ignore_env = 1};
    gpupool *p = NULL;
    cr_expect_eq(gpupool_create(&o, &p), GPUPOOL_OK, "tunables \"%s\": %s", confs[i],
                 gpupool_last_error());
    if (p && i)
      cr_expect_str_eq(gpupool_strategy_name(p), "round", "the pair before the ',' applies");
    gpupool_destroy(p);
    setenv("GPUPOOL_CONF", confs[i], 1);
    p = NULL;
    o.tunables = NULL;
    o.ignore_env = 0;
    cr_expect_eq(gpupool_create(&o, &p), GPUPOOL_OK, "GPUPOOL_CONF \"%s\": %s", confs[i],
                 gpupool_last_error());
    unsetenv("GPUPOOL_CONF");
    if (p && i)
      cr_expect_str_eq(gpupool_strategy_name(p), "round");
    gpupool_destroy(p);
  }
}

Test(pool_badinput, gpupool_conf_alone_configures_a_host_pool) {
  setenv("GPUPOOL_CONF", "backend:host,host_capacity_mb:64,strategy:naive,name:envpool", 1);
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(NULL, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  unsetenv("GPUPOOL_CONF");
  cr_expect_str_eq(gpupool_backend_name(p), "host");
  cr_expect_str_eq(gpupool_strategy_name(p), "naive");
  cr_expect_str_eq(gpupool_name(p), "envpool");
  void *x = NULL;
  cr_expect_eq(gpupool_malloc(p, &x, 100 * MiB, NULL), GPUPOOL_ERR_OOM, "a 64 MiB device");
  cr_expect_eq(gpupool_malloc(p, &x, 60 * MiB, NULL), GPUPOOL_OK);
  cr_expect_eq(gpupool_free(p, x), GPUPOOL_OK);
  gpupool_destroy(p);
}

Test(pool_badinput, defaults_without_options) {
  unsetenv("GPUPOOL_CONF");
  gpupool_options o = {.backend = GPUPOOL_BACKEND_HOST, .ignore_env = 1};
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK);
  cr_expect_str_eq(gpupool_name(p), "default");
  cr_expect_str_eq(gpupool_strategy_name(p), "bfc");
  cr_expect_eq(gpupool_device(p), 0);
  void *x = NULL; /* the 8 GiB default capacity holds 4 GiB (untouched, so cheap) */
  cr_expect_eq(gpupool_malloc(p, &x, 4 * PC_GiB, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(gpupool_free(p, x), GPUPOOL_OK);
  cr_expect_eq(gpupool_malloc(p, &x, 9 * PC_GiB, NULL), GPUPOOL_ERR_OOM);
  gpupool_destroy(p);
}

/* --- status strings -------------------------------------------------------- */

Test(pool_badinput, every_status_has_a_distinct_string) {
  const gpupool_status all[] = {GPUPOOL_OK, GPUPOOL_ERR_OOM, GPUPOOL_ERR_INVALID,
                                GPUPOOL_ERR_BACKEND, GPUPOOL_ERR_UNSUPPORTED};
  for (int i = 0; i < 5; i++) {
    const char *s = gpupool_status_string(all[i]);
    cr_assert_not_null(s, "status %d", all[i]);
    cr_expect_neq(s[0], '\0', "status %d", all[i]);
    for (int j = 0; j < i; j++)
      cr_expect_str_neq(s, gpupool_status_string(all[j]), "statuses %d and %d", all[i], all[j]);
  }
  const char *u = gpupool_status_string((gpupool_status)99);
  cr_assert_not_null(u);
  cr_expect_neq(u[0], '\0');
  const char *neg = gpupool_status_string((gpupool_status)-1);
  cr_assert_not_null(neg);
}

/* An entry too long to take, or one without ':' of any length, is refused
 * with its reason: the message quotes the start of the entry only, so the
 * reason always fits in it. */
Test(pool_badinput, a_long_entry_gets_its_reason) {
  static char conf[8192];
  snprintf(conf, sizeof conf, "max_split_size_mb:");
  memset(conf + strlen(conf), '0', 5000);
  strcat(conf, "25");
  cr_assert_eq(gpupool_conf_check(NULL, conf), GPUPOOL_ERR_INVALID);
  const char *e = gpupool_last_error();
  cr_expect(strstr(e, "...' is too long"), "%s", e);
  cr_expect_lt(strlen(e), 300, "%s", e);
  memset(conf, 'x', 5000);
  conf[5000] = '\0';
  cr_assert_eq(gpupool_conf_check(NULL, conf), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "...' is not key:value"), "%s", gpupool_last_error());
  snprintf(conf, sizeof conf, "strategy:bfc,,");
  memset(conf + strlen(conf), 'y', 5000);
  cr_assert_eq(gpupool_conf_check(NULL, conf), GPUPOOL_ERR_INVALID);
  cr_expect(strstr(gpupool_last_error(), "stray ',') in 'strategy:bfc,,yyy"), "%s",
            gpupool_last_error());
  cr_expect(strstr(gpupool_last_error(), "...'"), "%s", gpupool_last_error());
}

/* gpupool_options.host_capacity has host_capacity_mb's bound (1 PiB): a
 * larger one, whose range of pages the pool could not even describe, is
 * refused at create, as the key's is. */
Test(pool_badinput, host_capacity_over_a_pebibyte_is_refused) {
  gpupool_options o = {
      .backend = GPUPOOL_BACKEND_HOST, .tunables = "expandable_segments:True", .ignore_env = 1};
  gpupool *p = NULL;
  for (int shift = 51; shift <= 64; shift += 13) {
    o.host_capacity = shift == 64 ? SIZE_MAX : (size_t)1 << shift;
    cr_expect_eq(gpupool_create(&o, &p), GPUPOOL_ERR_INVALID, "%zu", o.host_capacity);
    cr_expect_null(p);
    cr_expect(strstr(gpupool_last_error(), "host_capacity"), "%s", gpupool_last_error());
    cr_expect_eq(gpupool_conf_check(&o, NULL), GPUPOOL_ERR_INVALID);
  }
  o.host_capacity = (size_t)1 << 50; /* the bound itself (a plain pool: the host's address
                                        space holds no range of 1 PiB) */
  o.tunables = NULL;
  cr_assert_eq(gpupool_create(&o, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  void *x = NULL;
  cr_expect_eq(gpupool_malloc(p, &x, 64 << 20, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(gpupool_free(p, x), GPUPOOL_OK);
  gpupool_destroy(p);
}
