/* Device probe and streams for the benchmarks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench_device.h"
#include "gpupool/host.h"

#ifdef GPUPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static void probe_host(char *buf, size_t len) {
  char model[200] = "unknown CPU";
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[512];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "model name", 10) != 0)
        continue;
      char *colon = strchr(line, ':');
      if (!colon)
        break;
      colon += 1 + (colon[1] == ' ');
      colon[strcspn(colon, "\n")] = 0;
      snprintf(model, sizeof model, "%s", colon);
      break;
    }
    fclose(f);
  }
  snprintf(buf, len, "%s, %ld cores", model, sysconf(_SC_NPROCESSORS_ONLN));
}

void bench_device_probe(bench_device *d) {
  memset(d, 0, sizeof *d);
  probe_host(d->host, sizeof d->host);
  d->backend = GPUPOOL_BACKEND_HOST;
  snprintf(d->name, sizeof d->name, "host backend (no GPU)");
#ifdef GPUPOOL_HAVE_CUDA
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    cudaGetLastError();
    return;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess || cudaSetDevice(0) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  d->gpu = 1;
  d->backend = GPUPOOL_BACKEND_CUDA;
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  snprintf(d->name, sizeof d->name, "%s (%.1f GiB, sm_%d%d, driver %d.%d, runtime %d.%d)",
           prop.name, prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor, driver / 1000,
           driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
#endif
}

void **bench_streams_create(const bench_device *d, int n) {
  void **s = calloc((size_t)n, sizeof *s);
  if (!s)
    return NULL;
  for (int i = 0; i < n; i++) {
#ifdef GPUPOOL_HAVE_CUDA
    if (d->gpu) {
      cudaStream_t cs;
      if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess) {
        bench_streams_destroy(d, s, i);
        return NULL;
      }
      s[i] = cs;
      continue;
    }
#endif
    s[i] = gpupool_host_stream_create();
    if (!s[i]) {
      bench_streams_destroy(d, s, i);
      return NULL;
    }
  }
  return s;
}

void bench_streams_destroy(const bench_device *d, void **streams, int n) {
  if (!streams)
    return;
  for (int i = 0; i < n; i++) {
#ifdef GPUPOOL_HAVE_CUDA
    if (d->gpu) {
      cudaStreamDestroy((cudaStream_t)streams[i]);
      continue;
    }
#endif
    gpupool_host_stream_destroy(streams[i]);
  }
  free(streams);
}

void bench_now_utc(char *buf, size_t len) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(buf, len, "%Y-%m-%d %H:%M UTC", &tm);
}
