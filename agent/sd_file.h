/* A Prometheus file_sd target file for this process, so that a Prometheus
 * whose file_sd_configs read the JSON files of sd_dir finds every agent on a
 * node without a list of ports. Written atomically, removed at stop. */
#ifndef GPUPOOL_SD_FILE_H
#define GPUPOOL_SD_FILE_H

#include <stddef.h>

#include "labels.h"

/* Writes <dir>/gpupool-<hostname>-<pid>.json with the target host:port
 * (hostname for a wildcard listen address) and, as __meta_gpupool_* labels for
 * relabelling, the pid, the hostname and the constant labels. The file's path
 * goes to path (pathlen bytes). 0 or -1 with a reason. */
int sd_file_write(const char *dir, const char *hostname, const char *listen_address, int wildcard,
                  int port, const agent_labels *labels, char *path, size_t pathlen, char *err,
                  size_t errlen);
void sd_file_remove(const char *path);

#endif
