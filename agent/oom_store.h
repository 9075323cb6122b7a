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

#define OOM_STORE_DEFAULT_KEEP 16
#define OOM_STORE_MAX_KEEP     1024

/* Starts observing (keep: reports kept, 0 = count only; dir: "" = none). */
void oom_store_start(size_t keep, const char *dir);
/* Stops observing (no callback runs after it returns) and frees the reports. */
void oom_store_stop(void);

typedef struct oom_store_counts {
  uint64_t total;        /* reports observed since start */
  uint64_t kept;         /* reports held now */
  uint64_t write_errors; /* reports oom_dir could not take */
  uint64_t kept_bytes;   /* host memory held by the kept reports */
} oom_store_counts;
void oom_store_get_counts(oom_store_counts *out);

/* GET /oom (the kept reports' summaries, oldest first) and /oom/<id>
 * (?format=json|torch). */
void oom_endpoint(const endpoint_args *args, endpoint_body *out);

#endif
