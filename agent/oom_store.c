/* oom_store.h: the last OOM reports, /oom and oom_dir. */
#include "oom_store.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cupti.h"
#include "device_info.h"
#include "exporters/oom_json.h"
#include "exporters/torch_snapshot.h"
#include "http.h"
#include "pool/oom_report.h"
#include "writable_dir.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
/* The kept reports, g_nkept of g_keep slots, by id, lowest first: ids are
 * taken at the capture and reports delivered later, not always in that
 * order (threads that fail at once), so each is put in its place, and the
 * lowest id goes first when the store is full. */
static pool_oom_report **g_kept;
static size_t g_keep, g_nkept;
static uint64_t g_total, g_write_errors, g_kept_bytes;
static char g_dir[4096];
/* oom_dir: the names (without extension) of the reports this agent wrote,
 * oldest first from g_written_first, a ring of g_dir_max; the oldest pair
 * goes when one more is written. Only deliveries (one at a time) and
 * start/stop touch it. */
static char (*g_written)[OOM_STORE_NAME_MAX];
static size_t g_dir_max, g_nwritten, g_written_first;

static uint64_t report_bytes(const pool_oom_report *r) {
  return sizeof *r + r->cap.nsegs * sizeof *r->cap.segs + r->cap.nblocks * sizeof *r->cap.blocks +
         r->cap.cap_runs * sizeof *r->cap.runs + r->cap.nevents * sizeof *r->cap.events;
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
  /* The message links /oom/<id> only where it is served: reports kept
   * (oom_reports above 0) and an HTTP server (not listen:off). */
  pthread_mutex_lock(&g_lock);
  int keeps = g_keep > 0;
  pthread_mutex_unlock(&g_lock);
  r->observed = keeps && http_port() > 0;
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

void oom_store_file_base(const pool_oom_report *r, char *out, size_t n) {
  time_t sec = (time_t)(r->time_ns / 1000000000u);
  struct tm tm;
  char when[32];
  gmtime_r(&sec, &tm);
  strftime(when, sizeof when, "%Y%m%dT%H%M%S", &tm);
  snprintf(out, n, "gpupool-oom-%s.%06uZ-%ld-%" PRIu64, when,
           (unsigned)(r->time_ns % 1000000000u / 1000u), (long)getpid(), r->id);
}

/* Writes data to a new file, <dir>/<base><ext>, or where a file of that name
 * is there (a temporary file left by a crash, or a link someone planted:
 * O_EXCL and O_NOFOLLOW never write through it) <dir>/<base>.<k><ext>, and
 * syncs it to the disk, so that the link that puts it in place never puts
 * an empty or short file there after a crash. 0 with the name in path, or
 * the errno that says why not (nothing is left then). */
static int write_new(const char *dir, const char *base, const char *ext, const char *data,
                     size_t len, char *path, size_t pathlen) {
  int fd = -1;
  for (unsigned k = 0; fd < 0 && k < 100; k++) {
    if (k)
      snprintf(path, pathlen, "%s/%s.%u%s", dir, base, k, ext);
    else
      snprintf(path, pathlen, "%s/%s%s", dir, base, ext);
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST)
      return errno;
  }
  if (fd < 0)
    return EEXIST;
  int err = 0;
  for (size_t done = 0; !err && done < len;) {
    ssize_t w = write(fd, data + done, len - done);
    if (w > 0)
      done += (size_t)w;
    else if (w < 0 && errno != EINTR)
      err = errno; /* a full disk: ENOSPC, or EFBIG past RLIMIT_FSIZE */
    else if (w == 0)
      err = EIO;
  }
  if (!err && fsync(fd) != 0)
    err = errno ? errno : EIO;
  if (close(fd) != 0 && !err)
    err = errno;
  if (err)
    unlink(path);
  return err;
}

/* Puts the file at tmp in place at path as well, unless something is there
 * (EEXIST: an earlier report's name, never replaced): link(2), which never
 * replaces a name; where the file system has no hard links,
 * renameat2(RENAME_NOREPLACE), which moves it (*moved). 0, or the errno. */
static int place(const char *tmp, const char *path, int *moved) {
  *moved = 0;
  if (link(tmp, path) == 0)
    return 0;
  int err = errno;
  if (err != EPERM && err != EOPNOTSUPP && err != ENOSYS && err != EMLINK) /* (ENOTSUP too) */
    return err;
#ifdef RENAME_NOREPLACE
  if (renameat2(AT_FDCWD, tmp, AT_FDCWD, path, RENAME_NOREPLACE) == 0) {
    *moved = 1;
    return 0;
  }
  if (errno != EINVAL && errno != ENOSYS)
    err = errno;
#endif
  return err;
}

/* Where the last report's pair goes in the ring of those written; the
 * oldest pair goes when there are more than g_dir_max, its JSON first (a
 * reader that finds a .json finds its .pickle). */
static void note_written(const char *dir, const char *name) {
  if (!g_dir_max || !g_written)
    return;
  char path[sizeof g_dir + OOM_STORE_NAME_MAX + 16];
  if (g_nwritten == g_dir_max) {
    const char *old = g_written[g_written_first];
    snprintf(path, sizeof path, "%s/%s.json", dir, old);
    unlink(path);
    snprintf(path, sizeof path, "%s/%s.pickle", dir, old);
    unlink(path);
    g_written_first = (g_written_first + 1) % g_dir_max;
    g_nwritten--;
  }
  snprintf(g_written[(g_written_first + g_nwritten) % g_dir_max], OOM_STORE_NAME_MAX, "%s", name);
  g_nwritten++;
}

/* oom_dir: the report as JSON and as a PyTorch snapshot pickle, both or
 * neither (a reader takes the pair), at a name no report had: each is
 * written whole under a temporary name and synced; then the pickle is
 * linked into place and the JSON last, so that a reader that finds a .json
 * finds its .pickle; a name taken (EEXIST: an earlier run's report, one of
 * another process of the same pid in another PID namespace) is never
 * replaced: the pair takes the next free name, <name>-2, -3, ... The
 * temporary names go, and the directory is synced so that the names last.
 * A failure before the links (a full disk) removes what was written. */
int oom_store_write(const pool_oom_report *r, const char *dir, char *name, size_t namelen) {
  char base[OOM_STORE_NAME_MAX], pub[OOM_STORE_NAME_MAX + 16];
  char json_tmp[4096 + OOM_STORE_NAME_MAX + 32], pickle_tmp[sizeof json_tmp];
  char json_path[sizeof json_tmp], pickle_path[sizeof json_tmp];
  oom_store_file_base(r, base, sizeof base);
  char *json = oom_json_report(r);
  const pool_capture *cap = &r->cap;
  size_t plen = 0;
  char *pickle = torch_snapshot_pickle(&cap, 1, &plen);
  int err = !json || !pickle
                ? ENOMEM
                : write_new(dir, base, ".json.tmp", json, strlen(json), json_tmp, sizeof json_tmp);
  if (!err) {
    err = write_new(dir, base, ".pickle.tmp", pickle, plen, pickle_tmp, sizeof pickle_tmp);
    if (err)
      unlink(json_tmp);
  }
  free(json);
  free(pickle);
  if (err)
    return err;
  err = EEXIST;
  for (unsigned n = 1; err == EEXIST && n <= 1000; n++) {
    if (n > 1)
      snprintf(pub, sizeof pub, "%s-%u", base, n);
    else
      snprintf(pub, sizeof pub, "%s", base);
    snprintf(pickle_path, sizeof pickle_path, "%s/%s.pickle", dir, pub);
    snprintf(json_path, sizeof json_path, "%s/%s.json", dir, pub);
    int moved_pickle, moved_json;
    err = place(pickle_tmp, pickle_path, &moved_pickle);
    if (err)
      continue;
    err = place(json_tmp, json_path, &moved_json);
    if (err && moved_pickle) /* no pickle without its JSON: back to its temporary name */
      rename(pickle_path, pickle_tmp);
    else if (err)
      unlink(pickle_path);
  }
  unlink(pickle_tmp); /* (gone already where they were moved) */
  unlink(json_tmp);
  if (err)
    return err;
  if (name)
    snprintf(name, namelen, "%s", pub);
  /* the names too must survive a crash; a sync that fails leaves the
   * complete pair in place but is counted and said as a write error */
  return writable_dir_sync(dir);
}

static void write_report(const pool_oom_report *r) {
  char name[OOM_STORE_NAME_MAX + 16] = "";
  int err = oom_store_write(r, g_dir, name, sizeof name);
  if (name[0])
    note_written(g_dir, name);
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
  g_total++;
  if (g_keep) {
    size_t at = g_nkept; /* r's place by id */
    while (at > 0 && g_kept[at - 1]->id > r->id)
      at--;
    if (g_nkept < g_keep) {
      memmove(g_kept + at + 1, g_kept + at, (g_nkept - at) * sizeof *g_kept);
      g_kept[at] = r;
      g_nkept++;
    } else if (at == 0) { /* older than every kept report: it goes first */
      old = r;
    } else { /* the lowest id goes */
      old = g_kept[0];
      memmove(g_kept, g_kept + 1, (at - 1) * sizeof *g_kept);
      g_kept[at - 1] = r;
    }
    if (old != r) {
      g_kept_bytes += report_bytes(r);
      if (old)
        g_kept_bytes -= report_bytes(old);
    }
  } else {
    old = r;
  }
  pthread_mutex_unlock(&g_lock);
  if (g_dir[0])
    write_report(r);
  pool_oom_report_free(old);
}

void oom_store_start(size_t keep, const char *dir, size_t dir_max) {
  oom_store_stop();
  pthread_mutex_lock(&g_lock);
  g_kept = keep ? calloc(keep, sizeof *g_kept) : NULL;
  g_keep = g_kept ? keep : 0;
  g_nkept = 0;
  g_total = g_write_errors = g_kept_bytes = 0;
  snprintf(g_dir, sizeof g_dir, "%s", dir ? dir : "");
  g_written = g_dir[0] && dir_max ? calloc(dir_max, sizeof *g_written) : NULL;
  g_dir_max = g_written ? dir_max : 0;
  g_nwritten = g_written_first = 0;
  pthread_mutex_unlock(&g_lock);
  pool_oom_observer o = {annotate, deliver, NULL};
  pool_oom_set_observer(&o);
}

void oom_store_stop(void) {
  pool_oom_set_observer(NULL); /* waits for a delivery in flight */
  pthread_mutex_lock(&g_lock);
  for (size_t i = 0; i < g_nkept; i++)
    pool_oom_report_free(g_kept[i]);
  free(g_kept);
  g_kept = NULL;
  g_keep = g_nkept = 0;
  g_kept_bytes = 0;
  free(g_written); /* the files stay */
  g_written = NULL;
  g_dir_max = g_nwritten = g_written_first = 0;
  pthread_mutex_unlock(&g_lock);
}

void oom_store_get_counts(oom_store_counts *out) {
  pthread_mutex_lock(&g_lock);
  out->total = g_total;
  out->kept = g_nkept;
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
  /* oldest (lowest id) first */
  char *text = oom_json_list((const pool_oom_report *const *)g_kept, g_nkept);
  pthread_mutex_unlock(&g_lock);
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
  for (size_t i = 0; i < g_nkept; i++) {
    const pool_oom_report *r = g_kept[i];
    if (r->id != id)
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
