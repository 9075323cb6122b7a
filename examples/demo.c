/* gpupool-demo: a training-loop workload on four pools per device: one per
 * strategy (bfc, round, naive) and bfc with expandable_segments:True (where
 * the backend has virtual memory management), with the agent serving /metrics, /trace and
 * /snapshot. Runs on the GPU where there is one (backend cuda), on the host
 * backend's simulated devices otherwise; GPUPOOL_CONF overrides either.
 * Stops after --seconds or on SIGINT/SIGTERM, cleanly, with status 0. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "demo_report.h"
#include "demo_streams.h"
#include "demo_workload.h"
#include "gpupool/agent.h"
#include "gpupool/gpupool.h"

#define MAX_DEVICES     64
#define STRATEGIES      4
#define REPORT_EVERY_NS (10 * 1000000000ll)

static const struct {
  const char *name; /* the pool's name */
  gpupool_strategy strategy;
  const char *strategy_name;
  const char *tunables;
} strategies[STRATEGIES] = {
    {"bfc", GPUPOOL_STRATEGY_BFC, "bfc", NULL},
    {"round", GPUPOOL_STRATEGY_ROUND, "round", "reserve_percent:5"},
    {"naive", GPUPOOL_STRATEGY_NAIVE, "naive", "reserve_percent:5"},
    /* The cap (PyTorch's per-process memory fraction) is above what this pool
     * holds: the dashboards draw it as the pool's limit line. */
    {"bfc-expandable", GPUPOOL_STRATEGY_BFC, "bfc", "expandable_segments:True,memory_fraction:0.9"},
};

typedef struct demo_args {
  double seconds; /* 0 = until a signal */
  const char *listen;
  const char *hostname;
  const char *sd_dir;
  int devices;
  double steps_per_second; /* 0 = as fast as it goes */
  size_t capacity_mb;
  uint64_t seed;
  int quiet;
} demo_args;

typedef struct demo_device {
  demo_streams streams;
  int streams_ok;
  gpupool *pools[STRATEGIES];
  demo_replica replicas[STRATEGIES];
  int replica_ok[STRATEGIES];
  int reported_error[STRATEGIES];
} demo_device;

static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) {
  (void)sig;
  stop_requested = 1;
}

static void usage(FILE *f) {
  fprintf(f, "usage: gpupool-demo [options]\n"
             "  --seconds N            stop after N seconds (default: run until Ctrl-C)\n"
             "  --listen HOST:PORT     agent address (default 127.0.0.1:9477, + LOCAL_RANK)\n"
             "  --hostname NAME        the hostname label of every series (default: gethostname)\n"
             "  --sd-dir DIR           the agent writes a Prometheus file_sd target file there\n"
             "  --device-count N       devices, four pools on each (default 1); on the host\n"
             "                         backend these are simulated devices\n"
             "  --steps-per-second R   training steps per second per pool (default 10, 0 = max)\n"
             "  --capacity-mb M        simulated device size on the host backend (default 2560)\n"
             "  --seed S               seed of the sequence lengths and free orders (default 1)\n"
             "  --quiet                no summary table every 10 seconds\n"
             "Pools on each device: bfc, round, naive and bfc-expandable (bfc with\n"
             "expandable_segments:True where the backend has virtual memory management,\n"
             "capped at 90 %% of the device: memory_fraction:0.9).\n"
             "Environment: GPUPOOL_CONF (pool options, e.g. backend:host) applies to every pool;\n"
             "a pool that refuses one of its keys (round and naive refuse\n"
             "expandable_segments:True) runs without that key, and says so. GPUPOOL_AGENT_CONF.\n");
}

static int parse_double(const char *s, double min, double max, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= min && v <= max))
    return -1;
  *out = v;
  return 0;
}

/* 0 ok, 1 --help, -1 bad arguments (message printed). */
static int parse_args(int argc, char **argv, demo_args *a) {
  static const struct option opts[] = {{"seconds", required_argument, 0, 's'},
                                       {"listen", required_argument, 0, 'l'},
                                       {"hostname", required_argument, 0, 'H'},
                                       {"sd-dir", required_argument, 0, 'D'},
                                       {"device-count", required_argument, 0, 'd'},
                                       {"steps-per-second", required_argument, 0, 'r'},
                                       {"capacity-mb", required_argument, 0, 'c'},
                                       {"seed", required_argument, 0, 'S'},
                                       {"quiet", no_argument, 0, 'q'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  *a = (demo_args){.devices = 1, .steps_per_second = 10, .capacity_mb = 2560, .seed = 1};
  double v;
  int c;
  while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
    switch (c) {
    case 's':
      if (parse_double(optarg, 0, 1e9, &a->seconds))
        goto bad;
      break;
    case 'l':
      a->listen = optarg;
      break;
    case 'H':
      a->hostname = optarg;
      break;
    case 'D':
      a->sd_dir = optarg;
      break;
    case 'd':
      if (parse_double(optarg, 1, MAX_DEVICES, &v) || v != (int)v)
        goto bad;
      a->devices = (int)v;
      break;
    case 'r':
      if (parse_double(optarg, 0, 1e6, &a->steps_per_second))
        goto bad;
      break;
    case 'c':
      if (parse_double(optarg, 64, 1 << 24, &v) || v != (size_t)v)
        goto bad;
      a->capacity_mb = (size_t)v;
      break;
    case 'S':
      if (parse_double(optarg, 0, 1e18, &v) || v != (uint64_t)v)
        goto bad;
      a->seed = (uint64_t)v;
      break;
    case 'q':
      a->quiet = 1;
      break;
    case 'h':
      usage(stdout);
      return 1;
    default:
      usage(stderr);
      return -1;
    }
  }
  if (optind < argc) {
    fprintf(stderr, "gpupool-demo: unexpected argument '%s'\n", argv[optind]);
    usage(stderr);
    return -1;
  }
  return 0;
bad:
  for (const struct option *o = opts; o->name; o++)
    if (o->val == c)
      fprintf(stderr, "gpupool-demo: bad value '%s' for --%s\n", optarg, o->name);
  return -1;
}

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* Sleeps until deadline (CLOCK_MONOTONIC ns) or a signal. */
static void sleep_until(int64_t deadline) {
  struct timespec ts = {(time_t)(deadline / 1000000000ll), (long)(deadline % 1000000000ll)};
  while (!stop_requested && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static int install_signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  return sigaction(SIGINT, &sa, NULL) || sigaction(SIGTERM, &sa, NULL) ? -1 : 0;
}

/* Creates a pool with GPUPOOL_CONF applied over o. When the pool refuses
 * GPUPOOL_CONF as a whole (round and naive refuse expandable_segments:True,
 * which the bfc pools take), each key:value is tried alone on top of the
 * ones kept so far: the pool gets those it accepts, and one line per key
 * it refused says so. Only with fallback: the first pool (plain bfc) takes
 * every valid setting, so what it refuses is an error in GPUPOOL_CONF. */
static gpupool_status create_pool(gpupool_options o, int ordinal, int fallback, gpupool **out) {
  if (gpupool_create(&o, out) == GPUPOOL_OK)
    return GPUPOOL_OK;
  const char *env = getenv("GPUPOOL_CONF");
  char first[512];
  snprintf(first, sizeof first, "%s", gpupool_last_error());
  size_t len = env ? strlen(env) : 0;
  char *items = env && *env ? strdup(env) : NULL, *kept = calloc(1, len + 512);
  if (!fallback || !items || !kept || o.ignore_env) {
    fprintf(stderr, "gpupool-demo: pool %s on device %d: %s\n", o.name, ordinal, first);
    free(items);
    free(kept);
    return GPUPOOL_ERR_INVALID;
  }
  snprintf(kept, len + 512, "%s", o.tunables ? o.tunables : "");
  char *trial = malloc(len + 512);
  gpupool_status st = trial ? GPUPOOL_OK : GPUPOOL_ERR_INVALID;
  o.ignore_env = 1; /* GPUPOOL_CONF's keys now go in through tunables, one by one */
  char *save = NULL;
  for (char *item = strtok_r(items, ",", &save); item && st == GPUPOOL_OK;
       item = strtok_r(NULL, ",", &save)) {
    snprintf(trial, len + 512, "%s%s%s", kept, kept[0] ? "," : "", item);
    o.tunables = trial;
    gpupool *probe;
    if (gpupool_create(&o, &probe) == GPUPOOL_OK) {
      gpupool_destroy(probe);
      strcpy(kept, trial);
    } else {
      fprintf(stderr,
              "gpupool-demo: pool %s on device %d refused GPUPOOL_CONF's '%s' (%s); it "
              "runs without it\n",
              o.name, ordinal, item, gpupool_last_error());
    }
  }
  if (st == GPUPOOL_OK) {
    o.tunables = kept;
    st = gpupool_create(&o, out);
    if (st != GPUPOOL_OK)
      fprintf(stderr, "gpupool-demo: pool %s on device %d: %s\n", o.name, ordinal,
              gpupool_last_error());
  }
  free(trial);
  free(items);
  free(kept);
  return st;
}

static int setup_device(demo_device *dev, int ordinal, const demo_args *a, const demo_model *m) {
  char err[256];
  for (int i = 0; i < STRATEGIES; i++) {
    gpupool_options o = {.name = strategies[i].name,
                         .device = ordinal,
                         .strategy = strategies[i].strategy,
                         .tunables = strategies[i].tunables,
                         .host_capacity = a->capacity_mb << 20};
    if (create_pool(o, ordinal, i > 0, &dev->pools[i]) != GPUPOOL_OK)
      return -1;
    if (strcmp(gpupool_strategy_name(dev->pools[i]), strategies[i].strategy_name) != 0)
      fprintf(stderr, "gpupool-demo: GPUPOOL_CONF sets the strategy: pool %s runs %s\n", o.name,
              gpupool_strategy_name(dev->pools[i]));
  }
  if (demo_streams_create(&dev->streams, gpupool_backend_name(dev->pools[0]), ordinal, err,
                          sizeof err) != 0) {
    fprintf(stderr, "gpupool-demo: %s\n", err);
    return -1;
  }
  dev->streams_ok = 1;
  for (int i = 0; i < STRATEGIES; i++) {
    if (demo_replica_init(&dev->replicas[i], dev->pools[i], &dev->streams, m) != GPUPOOL_OK) {
      fprintf(stderr, "gpupool-demo: cannot allocate the model's parameters: %s\n",
              dev->replicas[i].error);
      return -1;
    }
    dev->replica_ok[i] = 1;
  }
  return 0;
}

static void teardown_device(demo_device *dev) {
  for (int i = 0; i < STRATEGIES; i++) {
    if (dev->replica_ok[i])
      demo_replica_release(&dev->replicas[i]);
    gpupool_destroy(dev->pools[i]);
  }
  if (dev->streams_ok)
    demo_streams_destroy(&dev->streams);
}

static void run_step(demo_device *devs, int ndev, uint64_t seed, uint64_t step) {
  for (int d = 0; d < ndev; d++)
    for (int i = 0; i < STRATEGIES; i++) {
      demo_replica *r = &devs[d].replicas[i];
      gpupool_status st = demo_replica_step(r, seed + (uint64_t)d, step);
      if (st != GPUPOOL_OK && st != GPUPOOL_ERR_OOM && !devs[d].reported_error[i]) {
        fprintf(stderr, "gpupool-demo: device %d: %s (reported once)\n", d, r->error);
        devs[d].reported_error[i] = 1;
      }
    }
}

static void report(const demo_device *devs, int ndev) {
  demo_report_header(stdout);
  for (int d = 0; d < ndev; d++)
    for (int i = 0; i < STRATEGIES; i++)
      demo_report_line(stdout, &devs[d].replicas[i]);
  fflush(stdout);
}

/* The address people can open: a wildcard listen address is reachable on
 * loopback. */
static void print_endpoints(const demo_args *a, const char *backend, const demo_model *m) {
  const char *host = "127.0.0.1";
  char buf[256];
  if (a->listen && a->listen[0] != ':') {
    snprintf(buf, sizeof buf, "%s", a->listen);
    char *colon = buf[0] == '[' ? strstr(buf, "]:") : strrchr(buf, ':');
    if (colon)
      colon[buf[0] == '[' ? 1 : 0] = '\0';
    if (strcmp(buf, "0.0.0.0") != 0 && strcmp(buf, "[::]") != 0)
      host = buf;
  }
  int port = gpupool_agent_port();
  printf("gpupool-demo: pools bfc, round, naive, bfc-expandable on each of %d %s (backend %s",
         a->devices, strcmp(backend, "host") == 0 ? "simulated device(s)" : "GPU(s)", backend);
  if (strcmp(backend, "host") == 0)
    printf(", %zu MiB each", a->capacity_mb);
  printf("), sequence length %u..%u, ", m->seq_min, m->seq_max);
  if (a->steps_per_second > 0)
    printf("%g steps/s\n", a->steps_per_second);
  else
    printf("steps as fast as they go\n");
  printf("  metrics   http://%s:%d/metrics\n", host, port);
  printf("  trace     http://%s:%d/trace?since=-30   (the last 30 s; open in "
         "https://ui.perfetto.dev)\n",
         host, port);
  printf("  snapshot  http://%s:%d/snapshot\n", host, port);
  printf("  index     http://%s:%d/\n", host, port);
  printf("Stop with Ctrl-C.\n");
  fflush(stdout);
}

int main(int argc, char **argv) {
  demo_args a;
  int pr = parse_args(argc, argv, &a);
  if (pr != 0)
    return pr > 0 ? 0 : 2;
  if (install_signals() != 0) {
    perror("gpupool-demo: sigaction");
    return 1;
  }
  gpupool_agent_options ao = {.listen = a.listen, .hostname = a.hostname, .sd_dir = a.sd_dir};
  if (gpupool_agent_start(&ao) != GPUPOOL_OK) {
    fprintf(stderr, "gpupool-demo: the agent did not start: %s\n", gpupool_last_error());
    return 1;
  }

  demo_model model;
  demo_model_default(&model);
  demo_device *devs = calloc((size_t)a.devices, sizeof *devs);
  int status = devs ? 0 : 1;
  int ready = 0;
  while (devs && ready < a.devices && !stop_requested) {
    if (setup_device(&devs[ready], ready, &a, &model) != 0) {
      status = 1;
      ready++; /* what was set up is torn down below */
      break;
    }
    ready++;
  }

  if (status == 0 && !stop_requested) {
    print_endpoints(&a, gpupool_backend_name(devs[0].pools[0]), &model);
    int64_t start = now_ns(), next = start, next_report = start + REPORT_EVERY_NS;
    int64_t period = a.steps_per_second > 0 ? (int64_t)(1e9 / a.steps_per_second) : 0;
    int64_t end = a.seconds > 0 ? start + (int64_t)(a.seconds * 1e9) : INT64_MAX;
    for (uint64_t step = 0; !stop_requested; step++) {
      run_step(devs, a.devices, a.seed, step);
      int64_t t = now_ns();
      if (!a.quiet && t >= next_report) {
        report(devs, a.devices);
        next_report += REPORT_EVERY_NS;
      }
      if (t >= end)
        break;
      next += period;
      if (next < t - 1000000000ll)
        next = t; /* far behind: do not race to catch up */
      sleep_until(next < end ? next : end);
      if (now_ns() >= end)
        break;
    }
    if (!a.quiet)
      report(devs, a.devices);
  }

  gpupool_agent_stop();
  for (int d = 0; devs && d < ready; d++)
    teardown_device(&devs[d]);
  free(devs);
  if (status == 0)
    printf("gpupool-demo: stopped\n");
  return status;
}
