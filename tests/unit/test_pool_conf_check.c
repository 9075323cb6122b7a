/* gpupool_conf_check and gpupool_torch_conf_check: a GPUPOOL_CONF string
 * refused with the reason gpupool_create gives for it, and accepted when
 * gpupool_create accepts it, without creating a pool or reading the
 * environment. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/gpupool.h"
#include "gpupool/torch.h"

static void clean_env(void) {
  unsetenv("GPUPOOL_CONF");
}

TestSuite(conf_check, .init = clean_env);

static const gpupool_options host = {.backend = GPUPOOL_BACKEND_HOST,
                                     .host_capacity = (size_t)64 << 20};

/* Strings gpupool_create refuses in GPUPOOL_CONF over host: bad grammar,
 * unknown keys, bad values, refused combinations. */
static const char *const bad[] = {
    "garbage",
    "strategy:nope",
    "max_split_size_mb:-1",
    "max_split_size_mb:10",
    "no_such_key:1",
    "stratgy:round",
    ",strategy:round",
    "strategy:round,,",
    "name:",
    "device:2000",
    "roundup_power2_divisions:3",
    "expandable_segments:yes",
    "expandable_segments:True,strategy:round",
    "backend:cuda,fault_rate:0.5",
};

/* gpupool_create's reason for GPUPOOL_CONF=conf over opt, copied. */
static void create_reason(const gpupool_options *opt, const char *conf, char *out, size_t len) {
  setenv("GPUPOOL_CONF", conf, 1);
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(opt, &p), GPUPOOL_ERR_INVALID, "gpupool_create took '%s'", conf);
  cr_assert_null(p);
  unsetenv("GPUPOOL_CONF");
  snprintf(out, len, "%s", gpupool_last_error());
}

Test(conf_check, refuses_what_gpupool_create_refuses_with_its_reason) {
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    char expected[1024];
    create_reason(&host, bad[i], expected, sizeof expected);
    cr_expect_eq(gpupool_conf_check(&host, bad[i]), GPUPOOL_ERR_INVALID, "'%s' was accepted",
                 bad[i]);
    cr_expect_str_eq(gpupool_last_error(), expected, "'%s'", bad[i]);
  }
  cr_expect_str_eq((gpupool_conf_check(NULL, "strategy:nope"), gpupool_last_error()),
                   "GPUPOOL_CONF: strategy: unknown value 'nope' (valid: bfc, round, naive)");
}

Test(conf_check, accepts_what_gpupool_create_accepts) {
  static const char *const good[] = {
      NULL,
      "",
      "strategy:round",
      " strategy : naive , max_split_size_mb : inf ,",
      "max_split_size_mb:512,roundup_power2_divisions:4,garbage_collection_threshold:0.6",
      "expandable_segments:True,expandable_slack_percent:10",
      "fault_every_n:3,fault_seed:7",
      "strategy:bfc,strategy:round", /* the last one counts */
  };
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    cr_expect_eq(gpupool_conf_check(&host, good[i]), GPUPOOL_OK, "'%s': %s", good[i],
                 gpupool_last_error());
    if (!good[i])
      continue;
    setenv("GPUPOOL_CONF", good[i], 1);
    gpupool *p = NULL;
    cr_expect_eq(gpupool_create(&host, &p), GPUPOOL_OK, "gpupool_create refused '%s': %s", good[i],
                 gpupool_last_error());
    gpupool_destroy(p);
    unsetenv("GPUPOOL_CONF");
  }
}

Test(conf_check, a_success_leaves_the_last_error_as_it_was) {
  cr_assert_eq(gpupool_conf_check(NULL, "garbage"), GPUPOOL_ERR_INVALID);
  char before[512];
  snprintf(before, sizeof before, "%s", gpupool_last_error());
  cr_assert_eq(gpupool_conf_check(NULL, "strategy:round"), GPUPOOL_OK);
  cr_expect_str_eq(gpupool_last_error(), before);
}

/* errno too: numbers are read with strtoull, which is told apart from an
 * overflow by errno, but the caller's errno is never left 0 by it. */
Test(conf_check, a_success_leaves_errno_as_it_was) {
  errno = EAGAIN;
  cr_assert_eq(gpupool_conf_check(NULL, "max_split_size_mb:64,roundup_power2_divisions:4"),
               GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(errno, EAGAIN, "errno %d", errno);
  gpupool *p = NULL;
  errno = EAGAIN;
  cr_assert_eq(gpupool_create(&host, &p), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_expect_eq(errno, EAGAIN, "errno %d after gpupool_create", errno);
  gpupool_destroy(p);
}

Test(conf_check, reads_opt_but_not_the_environment) {
  setenv("GPUPOOL_CONF", "garbage", 1);
  cr_expect_eq(gpupool_conf_check(&host, "strategy:round"), GPUPOOL_OK,
               "GPUPOOL_CONF is not read: conf stands in for it");
  gpupool_options round = {.backend = GPUPOOL_BACKEND_HOST, .strategy = GPUPOOL_STRATEGY_ROUND};
  cr_expect_eq(gpupool_conf_check(&round, "expandable_segments:True"), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_conf_check(&round, "expandable_segments:True,strategy:bfc"), GPUPOOL_OK);
  gpupool_options bad_tunables = {.tunables = "strategy:nope"};
  cr_expect_eq(gpupool_conf_check(&bad_tunables, "strategy:round"), GPUPOOL_ERR_INVALID);
  cr_expect(strncmp(gpupool_last_error(), "gpupool tunables: ", 18) == 0, "%s",
            gpupool_last_error());
  gpupool_options bad_name = {.name = ""};
  cr_expect_eq(gpupool_conf_check(&bad_name, NULL), GPUPOOL_ERR_INVALID);
  gpupool_options ignoring = {.ignore_env = 1};
  cr_expect_eq(gpupool_conf_check(&ignoring, "garbage"), GPUPOOL_ERR_INVALID,
               "ignore_env does not switch the check off");
}

Test(conf_check, fault_keys_need_backend_host_once_a_backend_is_named) {
  cr_expect_eq(gpupool_conf_check(NULL, "fault_rate:0.5"), GPUPOOL_OK,
               "the default backend depends on the machine: gpupool_create decides");
  cr_expect_eq(gpupool_conf_check(NULL, "backend:host,fault_rate:0.5"), GPUPOOL_OK);
  cr_expect_eq(gpupool_conf_check(NULL, "backend:sim,fault_rate:0.5"), GPUPOOL_ERR_INVALID);
  cr_expect_str_eq(gpupool_last_error(),
                   "pool 'default': fault_rate: fault injection needs backend host");
  gpupool_options cuda = {.backend = GPUPOOL_BACKEND_CUDA};
  cr_expect_eq(gpupool_conf_check(&cuda, "fault_every_n:2"), GPUPOOL_ERR_INVALID);
  cr_expect_eq(gpupool_conf_check(&cuda, "fault_every_n:2,backend:host"), GPUPOOL_OK);
}

Test(conf_check, torch_checks_over_the_adapters_options) {
  cr_expect_eq(gpupool_torch_conf_check("backend:host,host_capacity_mb:64"), GPUPOOL_OK);
  cr_expect_eq(gpupool_torch_conf_check(NULL), GPUPOOL_OK);
  cr_expect_eq(gpupool_torch_conf_check("max_split_size_mb:-1"), GPUPOOL_ERR_INVALID);
  cr_expect_str_eq(
      gpupool_last_error(),
      "GPUPOOL_CONF: max_split_size_mb: '-1' is not a whole number (21 to 1073741824, or inf)");
  cr_expect_eq(gpupool_torch_conf_check("expandable_segments:True,strategy:naive"),
               GPUPOOL_ERR_INVALID);
  cr_expect_str_eq(gpupool_last_error(), "pool 'torch': expandable_segments needs strategy bfc");
  cr_expect_eq(gpupool_torch_conf_check("fault_rate:0.5"), GPUPOOL_ERR_INVALID,
               "the adapter's pools are on backend cuda unless conf says otherwise");
  cr_expect_eq(gpupool_torch_conf_check("fault_rate:0.5,backend:host"), GPUPOOL_OK);
  cr_expect_null(gpupool_torch_pool(0), "checking creates no pool");
}

/* Keys that the pools take but that would leave PyTorch's device: a device
 * key would put every device's pool on one GPU, and the sim backend's
 * addresses are fake. Refused, whatever the rest of the string, with the
 * key named; the pools' own keys and backends stay as they were. */
Test(conf_check, torch_refuses_a_device_and_the_sim_backend) {
  const char *refused[] = {"device:1", "device:0", "strategy:bfc, device :3", "backend:sim",
                           "max_split_size_mb:64,backend: sim"};
  for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
    cr_expect_eq(gpupool_torch_conf_check(refused[i]), GPUPOOL_ERR_INVALID, "%s", refused[i]);
    const char *why = gpupool_last_error();
    cr_expect(strncmp(why, "GPUPOOL_CONF: device: ", 22) == 0 ||
                  strncmp(why, "GPUPOOL_CONF: backend: 'sim' ", 29) == 0,
              "%s: %s", refused[i], why);
  }
  cr_expect_eq(gpupool_conf_check(NULL, "device:1"), GPUPOOL_OK, "a plain pool takes a device");
  cr_expect_eq(gpupool_conf_check(NULL, "backend:sim"), GPUPOOL_OK, "and the sim backend");
  cr_expect_eq(gpupool_torch_conf_check("backend:cuda_async"), GPUPOOL_OK);
  cr_expect_eq(gpupool_torch_conf_check("backend:cuda,name:trainer"), GPUPOOL_OK);
  cr_expect_eq(gpupool_torch_conf_check("garbage"), GPUPOOL_ERR_INVALID);
  cr_expect_str_eq(gpupool_last_error(), "GPUPOOL_CONF: 'garbage' is not key:value",
                   "a malformed string is refused as the pools refuse it");
  cr_expect_null(gpupool_torch_pool(0), "checking creates no pool");
}

/* Expandable segments on the cuda_async backend, which maps no pages of its
 * own: gpupool_create refuses it as unsupported before it looks for a
 * device, and gpupool_conf_check says the same (before, it took it). */
Test(conf_check, expandable_segments_on_cuda_async_is_unsupported) {
  const char *conf = "backend:cuda_async,expandable_segments:True";
  setenv("GPUPOOL_CONF", conf, 1);
  gpupool *p = NULL;
  cr_assert_eq(gpupool_create(&host, &p), GPUPOOL_ERR_UNSUPPORTED, "%s", gpupool_last_error());
  cr_assert_null(p);
  unsetenv("GPUPOOL_CONF");
  char expected[1024];
  snprintf(expected, sizeof expected, "%s", gpupool_last_error());
  cr_expect(strstr(expected, "expandable_segments needs virtual memory management"), "%s",
            expected);
  cr_expect_eq(gpupool_conf_check(&host, conf), GPUPOOL_ERR_UNSUPPORTED);
  cr_expect_str_eq(gpupool_last_error(), expected);
}
