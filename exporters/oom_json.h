/* OOM reports (pool/oom_report.h) as JSON for /oom, /oom/<id> and oom_dir:
 * pure renderers, no globals, no I/O. The document is described in
 * docs/oom.md. */
#ifndef GPUPOOL_OOM_JSON_H
#define GPUPOOL_OOM_JSON_H

#include <stddef.h>

#include "pool/oom_report.h"

/* One report, whole (segments, blocks, events); malloc'd text or NULL. */
char *oom_json_report(const pool_oom_report *r);
/* The summaries of n reports as a JSON array, in the order given. */
char *oom_json_list(const pool_oom_report *const *rs, size_t n);

#endif
