/* The demo's streams, on whichever backend its pools run: simulated host
 * streams (gpupool/host.h) or CUDA streams. The compute stream is the
 * default stream (NULL); comm carries gradient all-reduces and h2d input
 * copies, as in a data-parallel training job. */
#ifndef GPUPOOL_DEMO_STREAMS_H
#define GPUPOOL_DEMO_STREAMS_H

typedef struct demo_streams {
  void *compute; /* NULL: the default stream */
  void *comm;
  void *h2d;
  int host;   /* simulated host streams (else CUDA streams) */
  int device; /* CUDA ordinal the CUDA streams belong to */
} demo_streams;

/* backend is gpupool_backend_name() of the pools that will use the streams.
 * 0 on success; -1 with a one-line reason in err. */
int demo_streams_create(demo_streams *s, const char *backend, int device, char *err, size_t errlen);
void demo_streams_destroy(demo_streams *s);

/* Work is queued on stream: blocks freed after gpupool_record_stream on it
 * stay pending until demo_streams_finish. */
void demo_streams_enqueue(demo_streams *s, void *stream);
/* Everything queued on stream so far is done. */
void demo_streams_finish(demo_streams *s, void *stream);

#endif
