/* The agent's half of the OOM flight recorder: it observes the pools' OOM
 * reports (pool/oom_report.h), adds what only it knows (CUPTI's owner="other"
 * bytes on the device, its sampler's device reading when the pool had none),
 * keeps the last N (bounded memory), counts them, writes each to oom_dir when
 * configured, and serves /oom and /oom/<id>. */
#ifndef GPUPOOL_OOM_STORE_H
#define GPUPOOL_OOM_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "endpoint.h"
#include "pool/oom_report.h"

#define OOM_STORE_DEFAULT_KEEP 16
#define OOM_STORE_MAX_KEEP     1024
/* oom_dir holds at most this many of an agent's reports (pairs of files):
 * the oldest it wrote goes when it writes one more, so that an OOM retry
 * loop does not fill the disk. Reports of other processes (and of earlier
 * runs) are never removed. */
#define OOM_STORE_DEFAULT_DIR_MAX 64
/* A report's file name in oom_dir, without the extension (room for it). */
#define OOM_STORE_NAME_MAX 96

/* Starts observing (keep: reports kept, 0 = count only; dir: "" = none),
 * with oom_dir holding at most dir_max of this agent's reports (0: no bound). */
void oom_store_start(size_t keep, const char *dir, size_t dir_max);
/* Stops observing (no callback runs after it returns) and frees the reports. */
void oom_store_stop(void);

typedef struct oom_store_counts {
  uint64_t total;        /* reports observed since start */
  uint64_t kept;         /* reports held now */
  uint64_t write_errors; /* reports oom_dir could not take */
  uint64_t kept_bytes;   /* host memory held by the kept reports */
} oom_store_counts;
void oom_store_get_counts(oom_store_counts *out);

/* oom_dir's name of report r without its extension (.json, .pickle):
 * gpupool-oom-<UTC time, YYYYMMDDTHHMMSS.uuuuuuZ>-<pid>-<id>; a report that
 * finds the name taken gets -2, -3, ... after it (oom_store_write). */
void oom_store_file_base(const pool_oom_report *r, char *out, size_t n);
/* Writes r into directory dir as the agent writes each report into oom_dir
 * (docs/oom.md): both files or neither, never over an existing file. 0, or
 * the errno that says why not; name (when not NULL, namelen bytes) gets the
 * name used, without extension. */
int oom_store_write(const pool_oom_report *r, const char *dir, char *name, size_t namelen);

/* GET /oom (the kept reports' summaries, oldest first) and /oom/<id>
 * (?format=json|torch). */
void oom_endpoint(const endpoint_args *args, endpoint_body *out);

#endif
