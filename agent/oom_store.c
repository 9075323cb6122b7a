/* oom_store.h: the last OOM reports, /oom and oom_dir. */
#include "oom_store.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cupti.h"
#include "device_info.h"
#include "exporters/oom_json.h"
#include "exporters/torch_snapshot.h"
#include "pool/oom_report.h"
#include "writable_dir.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pool_oom_report **g_ring; /* g_keep slots; report total n in slot n % g_keep */
static size_t g_keep;
static uint64_t g_total, g_write_errors, g_kept_bytes;
static char g_dir[4096];

static uint64_t report_bytes(const pool_oom_report *r) {
  return sizeof *r + r->cap.nsegs * sizeof *r->cap.segs + r->cap.nblocks * sizeof *r->cap.blocks +
         r->cap.nevents * sizeof *r->cap.events;
}

/* CUPTI kinds of memory that live on the device. */
static uint64_t other_device_bytes(const cupti_device_metrics *d) {
  static const int kinds[] = {3 /* device */, 4 /* array */, 6 /* device_static */};
  uint64_t sum = 0;
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    sum += d->live_bytes[kinds[i]][1];
  return sum;
}

static void annotate(pool_oom_report *r, void *arg) {
  (void)arg;
  if (!r->device_known) {
    device_entry d[DEVICE_INFO_MAX];
    size_t n = device_info_copy(d, DEVICE_INFO_MAX);
    for (size_t i = 0; i < n; i++)
      if (d[i].ordinal == r->cap.device && d[i].free_known) {
        r->device_known = 1;
        r->device_free = d[i].free_bytes;
        r->device_total = d[i].total_bytes;
        snprintf(r->device_source, sizeof r->device_source,
                 "the agent's last device sample (cudaMemGetInfo)");
      }
  }
  if (!r->other_known) {
    cupti_metrics *m = malloc(sizeof *m);
    if (m) {
      cupti_get_metrics(m);
      for (size_t i = 0; m->up && i < m->ndevices; i++)
        if (m->devices[i].device == r->cap.device) {
          r->other_known = 1;
          r->other_bytes = other_device_bytes(&m->devices[i]);
          snprintf(r->other_source, sizeof r->other_source, "CUPTI owner=other");
        }
      if (m->up && !r->other_known) { /* recording, and nothing seen on that device */
        r->other_known = 1;
        snprintf(r->other_source, sizeof r->other_source, "CUPTI owner=other");
      }
      free(m);
    }
  }
}

/* Writes data to a new file at path and syncs it to the disk, so that the
 * rename that follows never puts an empty or short file in place after a
 * crash: 0, or the errno that says why not (nothing is left at path then). */
static int write_new(const char *path, const char *data, size_t len) {
  FILE *f = fopen(path, "wb");
  if (!f)
    return errno;
  errno = 0;
  int err = 0;
  if (fwrite(data, 1, len, f) != len)
    err = errno ? errno : EIO;
  if (!err && (fflush(f) != 0 || fsync(fileno(f)) != 0))
    err = errno ? errno : EIO;
  if (fclose(f) != 0 && !err)
    err = errno; /* a report smaller than f's buffer: a full disk shows only here */
  if (err)
    unlink(path);
  return err;
}

/* oom_dir: the report as JSON and as a PyTorch snapshot pickle, both or
 * neither (a reader takes the pair). Each is written whole under a
 * temporary name; then the pickle is renamed into place and the JSON last,
 * so that a reader that finds a .json finds its .pickle, and the directory
 * is synced so that the names last. A failure before the renames (a full
 * disk) removes what was written; any failure is counted, and said once. */
static void write_report(const pool_oom_report *r) {
  char json_path[sizeof g_dir + 64], pickle_path[sizeof g_dir + 64];
  char json_tmp[sizeof json_path + 8], pickle_tmp[sizeof pickle_path + 8];
  snprintf(json_path, sizeof json_path, "%s/gpupool-oom-%ld-%" PRIu64 ".json", g_dir,
           (long)getpid(), r->id);
  snprintf(pickle_path, sizeof pickle_path, "%s/gpupool-oom-%ld-%" PRIu64 ".pickle", g_dir,
           (long)getpid(), r->id);
  snprintf(json_tmp, sizeof json_tmp, "%s.tmp", json_path);
  snprintf(pickle_tmp, sizeof pickle_tmp, "%s.tmp", pickle_path);
  char *json = oom_json_report(r);
  const pool_capture *cap = &r->cap;
  size_t plen = 0;
  char *pickle = torch_snapshot_pickle(&cap, 1, &plen);
  int err = !json || !pickle ? ENOMEM : write_new(json_tmp, json, strlen(json));
  if (!err) {
    err = write_new(pickle_tmp, pickle, plen);
    if (!err) {
      if (rename(pickle_tmp, pickle_path) != 0) {
        err = errno;
        unlink(pickle_tmp);
      } else if (rename(json_tmp, json_path) != 0) {
        err = errno;
        unlink(pickle_path); /* no pickle without its JSON */
      } else {
        /* the names too must survive a crash; a sync that fails leaves the
         * complete pair in place but is counted and said as a write error */
        err = writable_dir_sync(g_dir);
      }
    }
    if (err) /* gone already where the renames were made */
      unlink(json_tmp);
  }
  free(json);
  free(pickle);
  if (!err)
    return;
  pthread_mutex_lock(&g_lock);
  int first = g_write_errors++ == 0;
  pthread_mutex_unlock(&g_lock);
  if (first) /* once: an OOM loop must not flood stderr */
    fprintf(stderr, "gpupool agent: cannot write OOM report %" PRIu64 " to oom_dir %s: %s\n", r->id,
            g_dir, strerror(err));
}

/* Deliveries are serialised by the pool (one at a time), and only they
 * evict: r stays valid here after the lock is dropped. */
static void deliver(pool_oom_report *r, void *arg) {
  (void)arg;
  pool_oom_report *old = NULL;
  pthread_mutex_lock(&g_lock);
  size_t slot = g_keep ? (size_t)(g_total % g_keep) : 0;
  g_total++;
  if (g_keep) {
    old = g_ring[slot];
    g_ring[slot] = r;
    g_kept_bytes += report_bytes(r);
    if (old)
      g_kept_bytes -= report_bytes(old);
  } else {
    old = r;
  }
  pthread_mutex_unlock(&g_lock);
  if (g_dir[0])
    write_report(r);
  pool_oom_report_free(old);
}

void oom_store_start(size_t keep, const char *dir) {
  oom_store_stop();
  pthread_mutex_lock(&g_lock);
  g_ring = keep ? calloc(keep, sizeof *g_ring) : NULL;
  g_keep = g_ring ? keep : 0;
  g_total = g_write_errors = g_kept_bytes = 0;
  snprintf(g_dir, sizeof g_dir, "%s", dir ? dir : "");
  pthread_mutex_unlock(&g_lock);
  pool_oom_observer o = {annotate, deliver, NULL};
  pool_oom_set_observer(&o);
}

void oom_store_stop(void) {
  pool_oom_set_observer(NULL); /* waits for a delivery in flight */
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_keep; i++)
    pool_oom_report_free(g_ring[i]);
  free(g_ring);
  g_ring = NULL;
  g_keep = 0;
  g_kept_bytes = 0;
  pthread_mutex_unlock(&g_lock);
}

void oom_store_get_counts(oom_store_counts *out) {
  pthread_mutex_lock(&g_lock);
  out->total = g_total;
  out->kept = g_keep ? (g_total < g_keep ? g_total : g_keep) : 0;
  out->write_errors = g_write_errors;
  out->kept_bytes = g_kept_bytes;
  pthread_mutex_unlock(&g_lock);
}

/* ---- /oom ---- */

static void plain(endpoint_body *out, int status, const char *line) {
  out->status = status;
  out->content_type = "text/plain; charset=utf-8";
  size_t n = strlen(line);
  out->data = malloc(n + 2);
  if (out->data) {
    memcpy(out->data, line, n);
    memcpy(out->data + n, "\n", 2);
  }
  out->len = out->data ? n + 1 : 0;
}

static void take_json(endpoint_body *out, char *text) {
  if (!text) {
    plain(out, 503, "out of memory rendering the OOM report");
    return;
  }
  out->status = 200;
  out->content_type = "application/json";
  out->data = text;
  out->len = strlen(text);
}

static void list(endpoint_body *out) {
  pthread_mutex_lock(&g_lock);
  size_t n = g_keep ? (size_t)(g_total < g_keep ? g_total : g_keep) : 0;
  const pool_oom_report **rs = malloc((n + 1) * sizeof *rs);
  char *text = NULL;
  if (rs) {
    for (size_t i = 0; i < n; i++) /* oldest first */
      rs[i] = g_ring[(size_t)((g_total - n + i) % g_keep)];
    text = oom_json_list(rs, n);
  }
  pthread_mutex_unlock(&g_lock);
  free(rs);
  take_json(out, text);
}

/* A report id: decimal digits of a number from 1 to 2^64 - 1 (every id a
 * report can have; before, 20 digits were refused, 2^64 - 1 among them),
 * written as /oom writes it: no leading zero, so that a report has one URL
 * (/oom/01 served report 1). 0, else -1. */
static int parse_id(const char *s, uint64_t *id) {
  uint64_t v = 0;
  if (*s < '1' || *s > '9')
    return -1;
  for (; *s; s++) {
    if (*s < '0' || *s > '9')
      return -1;
    unsigned d = (unsigned)(*s - '0');
    if (v > (UINT64_MAX - d) / 10)
      return -1;
    v = v * 10 + d;
  }
  if (!v)
    return -1;
  *id = v;
  return 0;
}

static void one(const char *idtext, const char *format, endpoint_body *out) {
  char shown[48];
  uint64_t id;
  endpoint_printable(shown, sizeof shown, idtext);
  if (parse_id(idtext, &id) != 0) {
    endpoint_bad_request(out,
                         "bad OOM report id '%s': expected a number from 1 to 2^64 - 1 in "
                         "decimal without leading zeros",
                         shown);
    return;
  }
  int torch = format && strcmp(format, "torch") == 0;
  char *data = NULL;
  size_t len = 0;
  int found = 0;
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_keep; i++) {
    const pool_oom_report *r = g_ring[i];
    if (!r || r->id != id)
      continue;
    found = 1;
    if (torch) {
      const pool_capture *cap = &r->cap;
      data = torch_snapshot_pickle(&cap, 1, &len);
    } else {
      data = oom_json_report(r);
      len = data ? strlen(data) : 0;
    }
  }
  pthread_mutex_unlock(&g_lock);
  if (!found) {
    char line[160];
    snprintf(line, sizeof line,
             "no OOM report %" PRIu64 " (the agent keeps the last %zu; see /oom)", id, g_keep);
    plain(out, 404, line);
    return;
  }
  if (!torch) {
    take_json(out, data);
    return;
  }
  if (!data) {
    plain(out, 503, "out of memory rendering the OOM report");
    return;
  }
  out->status = 200;
  out->content_type = "application/octet-stream";
  snprintf(out->filename, sizeof out->filename, "gpupool-oom-%" PRIu64 ".pickle", id);
  out->data = data;
  out->len = len;
}

void oom_endpoint(const endpoint_args *args, endpoint_body *out) {
  static const char *const names[] = {"format", NULL};
  endpoint_params p;
  endpoint_count_params(args, names, &p);
  int formats = p.count[0];
  const char *path = args->path ? args->path : "/oom";
  const char *rest = strncmp(path, "/oom/", 5) == 0 ? path + 5 : NULL;
  char shown[80];
  if (p.unknown) {
    endpoint_printable(shown, sizeof shown, p.unknown);
    endpoint_bad_request(out, "unknown parameter '%s' (%s)", shown,
                         rest ? "expected format" : "/oom takes none");
    return;
  }
  if (!rest) {
    if (formats) {
      endpoint_bad_request(out, "/oom takes no parameters (format is for /oom/<id>)");
      return;
    }
    list(out);
    return;
  }
  const char *format = args->get(args->ctx, "format");
  if (formats > 1) {
    endpoint_bad_request(out, "parameter 'format' given more than once");
    return;
  }
  if (format && strcmp(format, "json") != 0 && strcmp(format, "torch") != 0) {
    endpoint_printable(shown, sizeof shown, format);
    endpoint_bad_request(out, "bad format '%s' (expected json or torch)", shown);
    return;
  }
  one(rest, format, out);
}
