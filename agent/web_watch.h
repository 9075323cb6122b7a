/* Re-reads the web configuration file when it (or a certificate, key or CA
 * file it names) changes, as exporter-toolkit does per connection: a thread
 * hashes the files every WEB_WATCH_INTERVAL_MS and, on a change, loads and
 * validates them. A good file replaces the configuration (basic auth users
 * and headers at once; TLS material, client CAs and versions by moving the
 * listening socket to a new server, see http_restart); a bad one keeps the
 * last good configuration, with a line on stderr and
 * gpupool_agent_web_config_last_reload_successful 0. */
#ifndef GPUPOOL_WEB_WATCH_H
#define GPUPOOL_WEB_WATCH_H

#include <stddef.h>

#include "web_config.h"

#define WEB_WATCH_INTERVAL_MS 1000

/* running: the configuration in use (loaded from path, with files). 0 or -1
 * with a reason. */
int web_watch_start(const char *path, const web_config *running, const web_files *files,
                    int healthz_open, char *err, size_t errlen);
/* Joins the thread; idempotent. */
void web_watch_stop(void);

#endif
