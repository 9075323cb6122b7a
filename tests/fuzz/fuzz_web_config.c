/* libFuzzer target: the agent's web configuration file (exporter-toolkit's
 * YAML: TLS, basic auth, headers, rate limit), loaded and validated whole
 * by web_config_load. The bytes reach it through a memfd, by its
 * /proc/self/fd path. */
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "agent/web_config.h"
#include "fuzz_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char path[64], err[512];
  int fd = fuzz_file("fuzz_web_config", data, size, path, sizeof path);
  web_config *c = NULL;
  web_files files;
  if (web_config_load(path, (int64_t)time(NULL), &c, &files, err, sizeof err) == 0)
    web_config_free(c);
  close(fd);
  return 0;
}
