#include "sd_file.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/json_text.h"

/* The hostname as part of a file name: no '/' nor leading dot. */
static void file_safe(const char *s, char *out, size_t outlen) {
  size_t o = 0;
  for (; *s && o + 1 < outlen; s++) {
    char c = *s;
    int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '-' || c == '_' || (c == '.' && o > 0);
    out[o++] = ok ? c : '_';
  }
  out[o] = '\0';
}

static char *render(const char *target, const char *hostname, const agent_labels *labels) {
  cJSON *root = cJSON_CreateArray();
  cJSON *group = cJSON_CreateObject();
  cJSON *targets = cJSON_CreateArray();
  cJSON *meta = cJSON_CreateObject();
  char pid[24];
  snprintf(pid, sizeof pid, "%ld", (long)getpid());
  cJSON_AddItemToArray(targets, json_create_text(target));
  cJSON_AddStringToObject(meta, "__meta_gpupool_pid", pid);
  json_add_text(meta, "__meta_gpupool_hostname", hostname);
  for (size_t i = 0; labels && i < labels->n; i++) {
    char name[LABEL_NAME_MAX + 32];
    snprintf(name, sizeof name, "__meta_gpupool_label_%s", labels->name[i]);
    json_add_text(meta, name, labels->value[i]);
  }
  cJSON_AddItemToObject(group, "targets", targets);
  cJSON_AddItemToObject(group, "labels", meta);
  cJSON_AddItemToArray(root, group);
  char *text = cJSON_Print(root); /* NULL if any allocation above failed */
  cJSON_Delete(root);
  return text;
}

int sd_file_write(const char *dir, const char *hostname, const char *listen_address, int wildcard,
                  int port, const agent_labels *labels, char *path, size_t pathlen, char *err,
                  size_t errlen) {
  char safe[128], target[320], tmp[4200];
  file_safe(hostname, safe, sizeof safe);
  if (wildcard)
    snprintf(target, sizeof target, "%s:%d", hostname, port);
  else
    snprintf(target, sizeof target, "%s", listen_address);
  long pid = (long)getpid();
  if ((size_t)snprintf(path, pathlen, "%s/gpupool-%s-%ld.json", dir, safe, pid) >= pathlen ||
      (size_t)snprintf(tmp, sizeof tmp, "%s/.gpupool-%s-%ld.json.tmp", dir, safe, pid) >=
          sizeof tmp) {
    snprintf(err, errlen, "sd_dir: path too long");
    return -1;
  }
  char *text = render(target, hostname, labels);
  if (!text) {
    snprintf(err, errlen, "sd_dir: out of memory");
    return -1;
  }
  /* sd_dir is often shared (NFS, /var/run): never follow a link planted at
   * the predictable temporary name, never write into a file that exists. */
  unlink(tmp);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
  int e = errno;
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (fd >= 0 && !f) {
    e = errno;
    close(fd);
    unlink(tmp);
  }
  int ok = f != NULL;
  if (f) {
    ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
    e = errno;
    /* The text is smaller than f's buffer: a full disk shows only here. */
    if (fclose(f) != 0 && ok) {
      ok = 0;
      e = errno;
    }
  }
  free(text);
  /* rename() replaces the file in one step: Prometheus never reads half of it. */
  if (!ok || rename(tmp, path) != 0) {
    if (ok)
      e = errno;
    if (f)
      unlink(tmp);
    snprintf(err, errlen, "sd_dir: cannot write %s: %s", path, strerror(e));
    path[0] = '\0';
    return -1;
  }
  return 0;
}

void sd_file_remove(const char *path) {
  if (path && *path)
    unlink(path);
}
