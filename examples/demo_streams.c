/* Streams of the demo: simulated ones on the host backend, real ones on the
 * CUDA backends (where the demo launches no kernel, so work is always done). */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "demo_streams.h"
#include "gpupool/host.h"

#ifdef GPUPOOL_HAVE_CUDA
#include <cuda_runtime_api.h>

static int cuda_streams_create(demo_streams *s, char *err, size_t errlen) {
  int previous = 0;
  cudaError_t e = cudaGetDevice(&previous);
  if (e == cudaSuccess)
    e = cudaSetDevice(s->device);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags((cudaStream_t *)&s->comm, cudaStreamNonBlocking);
  if (e == cudaSuccess)
    e = cudaStreamCreateWithFlags((cudaStream_t *)&s->h2d, cudaStreamNonBlocking);
  cudaSetDevice(previous);
  if (e != cudaSuccess) {
    snprintf(err, errlen, "cannot create CUDA streams on device %d: %s", s->device,
             cudaGetErrorString(e));
    demo_streams_destroy(s);
    return -1;
  }
  return 0;
}

static void cuda_streams_destroy(demo_streams *s) {
  if (s->comm)
    cudaStreamDestroy((cudaStream_t)s->comm);
  if (s->h2d)
    cudaStreamDestroy((cudaStream_t)s->h2d);
}
#else
static int cuda_streams_create(demo_streams *s, char *err, size_t errlen) {
  snprintf(err, errlen, "built without CUDA: no streams for device %d", s->device);
  return -1;
}

static void cuda_streams_destroy(demo_streams *s) {
  (void)s;
}
#endif

int demo_streams_create(demo_streams *s, const char *backend, int device, char *err,
                        size_t errlen) {
  memset(s, 0, sizeof *s);
  s->device = device;
  s->host = strcmp(backend, "host") == 0;
  if (!s->host)
    return cuda_streams_create(s, err, errlen);
  s->comm = gpupool_host_stream_create();
  s->h2d = gpupool_host_stream_create();
  if (!s->comm || !s->h2d) {
    snprintf(err, errlen, "cannot create host streams: out of memory");
    demo_streams_destroy(s);
    return -1;
  }
  return 0;
}

void demo_streams_destroy(demo_streams *s) {
  if (s->host) {
    if (s->comm)
      gpupool_host_stream_destroy(s->comm);
    if (s->h2d)
      gpupool_host_stream_destroy(s->h2d);
  } else {
    cuda_streams_destroy(s);
  }
  s->comm = s->h2d = NULL;
}

void demo_streams_enqueue(demo_streams *s, void *stream) {
  if (s->host && stream)
    gpupool_host_stream_enqueue(stream);
}

void demo_streams_finish(demo_streams *s, void *stream) {
  if (s->host && stream)
    gpupool_host_stream_complete(stream);
}
