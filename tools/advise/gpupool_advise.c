/* gpupool-advise: which pool settings should this job use, and how much
 * device memory does it need? Replays an allocation history (a
 * GPUPOOL_RECORD file, a /trace document or a PyTorch memory snapshot)
 * under candidate configurations; docs/advisor.md explains the output. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpupool/advisor.h"

#define MAX_EXTRA 256

static void usage(FILE *f) {
  fprintf(f,
          "usage: gpupool-advise [options] HISTORY\n"
          "HISTORY: a GPUPOOL_RECORD file, a /trace document saved from the agent, or a PyTorch\n"
          "memory snapshot (torch.cuda.memory._dump_snapshot()), plain or gzip'd; '-' reads\n"
          "standard input.\n"
          "  --format auto|record|trace|torch   how to read HISTORY (default: by content)\n"
          "  --pool NAME        trace: the pool to advise on, NAME@DEVICE where pools of\n"
          "                     that name are on several devices; snapshot or record\n"
          "                     file: the device ordinal (default: the one with the\n"
          "                     most events)\n"
          "  --capacity GIB     simulated device size in GiB (default 80)\n"
          "  --step MIB         granularity of the smallest-capacity search (default 2)\n"
          "  --max-added-ms MS  device-call time a recommendation may add over the current\n"
          "                     configuration (default: 1%% of the history's duration, at\n"
          "                     least 100 ms)\n"
          "  --current CONF     the configuration in use, GPUPOOL_CONF grammar (default: bfc)\n"
          "  --conf CONF        another configuration to try (repeatable)\n"
          "  --only             try only --current and --conf (one needed), not the grid\n"
          "  --no-capacity      skip the smallest-capacity search\n"
          "  --threads N        replay workers (default: one per core)\n"
          "  --json | --csv     machine-readable output instead of the table\n"
          "  -h, --help         this text\n");
}

/* Exit status once the output is written: 0, or 1 with the reason when
 * standard output could not take it (a full disk; what stdio still buffered
 * shows only at the flush). */
static int finish_stdout(void) {
  if (fflush(stdout) == 0 && !ferror(stdout))
    return 0;
  fprintf(stderr, "gpupool-advise: cannot write to standard output: %s\n", strerror(errno));
  return 1;
}

static int parse_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo && v <= hi))
    return -1;
  *out = v;
  return 0;
}

int main(int argc, char **argv) {
  const char *format = "table", *in_format = NULL, *pool = NULL, *path = NULL;
  const char *extra[MAX_EXTRA];
  /* the documented defaults, set here so that --capacity is checked against --step */
  gpupool_advice_options o = {
      .capacity = (uint64_t)80 << 30, .capacity_step = (uint64_t)2 << 20, .max_added_ms = NAN};
  const char *capacity = NULL;
  o.extra = extra;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    double d;
    int takes = !strcmp(a, "--format") || !strcmp(a, "--pool") || !strcmp(a, "--capacity") ||
                !strcmp(a, "--step") || !strcmp(a, "--max-added-ms") || !strcmp(a, "--current") ||
                !strcmp(a, "--conf") || !strcmp(a, "--threads");
    if (takes && !v) {
      fprintf(stderr, "gpupool-advise: %s needs a value (see --help)\n", a);
      return 2;
    }
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return finish_stdout();
    } else if (!strcmp(a, "--json") || !strcmp(a, "--csv")) {
      if (strcmp(format, "table") && strcmp(format, a + 2)) {
        fprintf(stderr, "gpupool-advise: --json or --csv, not both\n");
        return 2;
      }
      format = a + 2;
    } else if (!strcmp(a, "--only")) {
      o.no_defaults = 1;
    } else if (!strcmp(a, "--no-capacity")) {
      o.no_capacity = 1;
    } else if (!strcmp(a, "--format")) {
      if (strcmp(v, "auto") && strcmp(v, "record") && strcmp(v, "trace") && strcmp(v, "torch")) {
        fprintf(stderr,
                "gpupool-advise: --format '%s': unknown history format (auto, record, trace or "
                "torch)\n",
                v);
        return 2;
      }
      in_format = v;
    } else if (!strcmp(a, "--pool")) {
      pool = v;
    } else if (!strcmp(a, "--current")) {
      o.current = v;
    } else if (!strcmp(a, "--conf")) {
      if (o.n_extra == MAX_EXTRA) {
        fprintf(stderr, "gpupool-advise: more than %d --conf\n", MAX_EXTRA);
        return 2;
      }
      extra[o.n_extra++] = v;
    } else if (!strcmp(a, "--capacity")) {
      if (parse_double(v, 0.001, 1 << 20, &d)) {
        fprintf(stderr, "gpupool-advise: --capacity '%s' is not a size in GiB\n", v);
        return 2;
      }
      o.capacity = (uint64_t)(d * (1 << 30));
      capacity = v;
    } else if (!strcmp(a, "--step")) {
      if (parse_double(v, 1, 1 << 20, &d) || d != floor(d)) {
        fprintf(stderr, "gpupool-advise: --step '%s' is not a whole number of MiB\n", v);
        return 2;
      }
      o.capacity_step = (uint64_t)d << 20;
    } else if (!strcmp(a, "--max-added-ms")) {
      if (parse_double(v, 0, 1e12, &o.max_added_ms)) {
        fprintf(stderr, "gpupool-advise: --max-added-ms '%s' is not a time in ms >= 0\n", v);
        return 2;
      }
    } else if (!strcmp(a, "--threads")) {
      if (parse_double(v, 1, 64, &d) || d != floor(d)) {
        fprintf(stderr, "gpupool-advise: --threads '%s' is not a number from 1 to 64\n", v);
        return 2;
      }
      o.threads = (unsigned)d;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "gpupool-advise: unknown option %s (see --help)\n", a);
      return 2;
    } else if (path) {
      fprintf(stderr, "gpupool-advise: one HISTORY only (got %s and %s)\n", path, a);
      return 2;
    } else {
      path = a;
    }
    if (takes)
      i++;
  }
  if (!path) {
    usage(stderr);
    return 2;
  }
  if (o.capacity < o.capacity_step) {
    fprintf(stderr, "gpupool-advise: --capacity %s GiB is less than the --step of %llu MiB\n",
            capacity ? capacity : "80", (unsigned long long)(o.capacity_step >> 20));
    return 2;
  }
  if (o.no_defaults && !o.current && !o.n_extra) {
    fprintf(stderr, "gpupool-advise: --only tries --current and --conf: give one of them\n");
    return 2;
  }
  gpupool_history *h;
  if (gpupool_history_load(path, in_format, pool, &h) != GPUPOOL_OK) {
    fprintf(stderr, "gpupool-advise: %s\n", gpupool_last_error());
    return 1;
  }
  gpupool_advice *adv;
  gpupool_status st = gpupool_advise(h, &o, &adv);
  gpupool_history_free(h);
  if (st != GPUPOOL_OK) {
    fprintf(stderr, "gpupool-advise: %s\n", gpupool_last_error());
    return 1;
  }
  char *text = gpupool_advice_render(adv, format);
  gpupool_advice_free(adv);
  if (!text) {
    fprintf(stderr, "gpupool-advise: out of memory rendering the advice\n");
    return 1;
  }
  fputs(text, stdout);
  int status = finish_stdout();
  free(text);
  return status;
}
