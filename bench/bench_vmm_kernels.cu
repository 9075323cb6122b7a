/* What expandable segments' page mappings cost the GPU's own work (issue 22),
 * two tables, each side by side with its baseline in one run:
 *
 * 1. Kernels over memory mapped page by page: a streaming read, a streaming
 *    write and random 4-byte reads (over the whole buffer, 256 MiB and
 *    32 MiB of it: the GPU's TLB reach) in a buffer from cudaMalloc against
 *    the same buffer made of one cuMemCreate handle, of 20 MiB handles
 *    (PyTorch's expandable segments map large segments in those), of 2 MiB
 *    handles (gpupool's pages) and of 2 MiB handles mapped in shuffled order.
 * 2. A "step" of kernels on one stream ended by a wait (as a training step
 *    ends in loss.item()), with pages of another range moved (unmap, map,
 *    set access: what the pool does for a page move) by another thread as
 *    fast as it can, and by the launching thread itself, spread while the
 *    GPU is busy or all at the step's start, where the GPU waits for them.
 *
 *   bench_vmm_kernels [--quick] [--device N]
 *
 * CUDA only; needs a device. Prints markdown. */
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#define CU_OK(x) cu_check((x), #x, __LINE__)
#define RT_OK(x) rt_check((x), #x, __LINE__)

static void cu_check(CUresult r, const char *what, int line) {
  if (r == CUDA_SUCCESS)
    return;
  const char *s = "unknown";
  cuGetErrorString(r, &s);
  fprintf(stderr, "bench_vmm_kernels:%d: %s: %s\n", line, what, s);
  exit(1);
}

static void rt_check(cudaError_t r, const char *what, int line) {
  if (r == cudaSuccess)
    return;
  fprintf(stderr, "bench_vmm_kernels:%d: %s: %s\n", line, what, cudaGetErrorString(r));
  exit(1);
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

__global__ void read_all(const float4 *p, size_t n, float *sink) {
  float s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x) {
    float4 v = p[i];
    s += v.x + v.y + v.z + v.w;
  }
  if (s == -1.f) /* never: keeps the loads */
    sink[0] = s;
}

__global__ void write_all(float4 *p, size_t n) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
       i += (size_t)gridDim.x * blockDim.x)
    p[i] = make_float4(1, 2, 3, 4);
}

/* reps random 4-byte reads per thread within the first words of p. */
__global__ void gather(const float *p, size_t words, int reps, float *sink) {
  unsigned long long x = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x + 1;
  float s = 0;
  for (int r = 0; r < reps; r++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    s += p[x % words];
  }
  if (s == -1.f)
    sink[0] = s;
}

static CUdevice dev;
static CUcontext ctx;
static CUmemAllocationProp prop;
static CUmemAccessDesc access_desc;

/* size bytes of address space mapped with handles of `handle` bytes (a
 * multiple of the granularity), mapped and given access one handle at a time
 * as a pool does, in shuffled order when asked. */
static CUdeviceptr map_in_handles(size_t size, size_t handle, int shuffle) {
  CUdeviceptr base;
  CU_OK(cuMemAddressReserve(&base, size, 0, 0, 0));
  size_t n = size / handle;
  std::vector<CUmemGenericAllocationHandle> h(n);
  for (size_t i = 0; i < n; i++)
    CU_OK(cuMemCreate(&h[i], handle, &prop, 0));
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; i++)
    order[i] = i;
  if (shuffle) {
    srand(7);
    for (size_t i = n - 1; i > 0; i--)
      std::swap(order[i], order[(size_t)rand() % (i + 1)]);
  }
  for (size_t i = 0; i < n; i++) {
    CU_OK(cuMemMap(base + i * handle, handle, 0, h[order[i]], 0));
    CU_OK(cuMemSetAccess(base + i * handle, handle, &access_desc, 1));
    CU_OK(cuMemRelease(h[order[i]])); /* the mapping keeps the memory */
  }
  return base;
}

static void unmap_all(CUdeviceptr base, size_t size) {
  CU_OK(cuMemUnmap(base, size));
  CU_OK(cuMemAddressFree(base, size));
}

static float event_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms;
  RT_OK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

static void kernels_table(size_t total, int reps_timed, float *sink) {
  struct kind {
    const char *name;
    size_t handle; /* 0: cudaMalloc */
    int shuffle;
  } kinds[] = {{"cudaMalloc", 0, 0},
               {"VMM, one handle", total, 0},
               {"VMM, 20 MiB handles", (size_t)20 << 20, 0},
               {"VMM, 2 MiB handles (gpupool's pages)", (size_t)2 << 20, 0},
               {"VMM, 2 MiB handles mapped in shuffled order", (size_t)2 << 20, 1}};
  const int nk = sizeof kinds / sizeof kinds[0], threads = 132 * 2048, reads = 64;
  const size_t windows[3] = {0, (size_t)256 << 20, (size_t)32 << 20}; /* 0: the whole buffer */
  double res[8][6];
  cudaEvent_t e0, e1;
  RT_OK(cudaEventCreate(&e0));
  RT_OK(cudaEventCreate(&e1));
  for (int k = 0; k < nk; k++) {
    /* the same bytes for every kind: a multiple of 20 MiB and of 2 MiB */
    size_t size = total / ((size_t)20 << 20) * ((size_t)20 << 20);
    char *p;
    if (!kinds[k].handle)
      RT_OK(cudaMalloc((void **)&p, size));
    else
      p = (char *)map_in_handles(size, std::min(kinds[k].handle, size), kinds[k].shuffle);
    size_t n4 = size / 16;
    write_all<<<1320, 256>>>((float4 *)p, n4);
    RT_OK(cudaDeviceSynchronize());
    std::vector<double> t[6];
    for (int r = 0; r < reps_timed + 2; r++) {
      RT_OK(cudaEventRecord(e0));
      read_all<<<1320, 256>>>((const float4 *)p, n4, sink);
      RT_OK(cudaEventRecord(e1));
      RT_OK(cudaEventSynchronize(e1));
      if (r >= 2)
        t[0].push_back(event_ms(e0, e1));
      RT_OK(cudaEventRecord(e0));
      write_all<<<1320, 256>>>((float4 *)p, n4);
      RT_OK(cudaEventRecord(e1));
      RT_OK(cudaEventSynchronize(e1));
      if (r >= 2)
        t[1].push_back(event_ms(e0, e1));
      for (int w = 0; w < 3; w++) {
        size_t words = (windows[w] ? windows[w] : size) / 4;
        RT_OK(cudaEventRecord(e0));
        gather<<<threads / 256, 256>>>((const float *)p, words, reads, sink);
        RT_OK(cudaEventRecord(e1));
        RT_OK(cudaEventSynchronize(e1));
        if (r >= 2)
          t[2 + w].push_back(event_ms(e0, e1));
      }
    }
    RT_OK(cudaGetLastError());
    res[k][0] = (double)size / median(t[0]) / 1e6; /* GB/s */
    res[k][1] = (double)size / median(t[1]) / 1e6;
    for (int w = 0; w < 3; w++)
      res[k][2 + w] = (double)threads * reads / median(t[2 + w]) / 1e3; /* 10^6 reads/s */
    if (!kinds[k].handle)
      RT_OK(cudaFree(p));
    else
      unmap_all((CUdeviceptr)p, size);
  }
  printf("### Kernels over memory mapped page by page (median of %d; relative to cudaMalloc)\n\n",
         reps_timed);
  printf("| memory | read GB/s | write GB/s | random reads, whole buffer, 10^6/s | in 256 MiB | in "
         "32 MiB |\n|---|---:|---:|---:|---:|---:|\n");
  for (int k = 0; k < nk; k++) {
    printf("| %s |", kinds[k].name);
    for (int c = 0; c < 5; c++)
      printf(" %.0f (%.3f) |", res[k][c], res[k][c] / res[0][c]);
    printf("\n");
  }
  printf("\n");
  RT_OK(cudaEventDestroy(e0));
  RT_OK(cudaEventDestroy(e1));
}

/* Pages moved between two halves of a reserved range, as the pool moves a
 * page: unmap where it was, map where it goes, set access. */
enum { MOVE_PAGES = 64 };
static CUdeviceptr move_range;
static size_t page_bytes;
static CUmemGenericAllocationHandle move_handle[MOVE_PAGES];
static int move_half[MOVE_PAGES];

static void move_page(int i) {
  CUdeviceptr from = move_range + ((size_t)move_half[i] * MOVE_PAGES + i) * page_bytes;
  CUdeviceptr to = move_range + ((size_t)(1 - move_half[i]) * MOVE_PAGES + i) * page_bytes;
  CU_OK(cuMemUnmap(from, page_bytes));
  CU_OK(cuMemMap(to, page_bytes, 0, move_handle[i], 0));
  CU_OK(cuMemSetAccess(to, page_bytes, &access_desc, 1));
  move_half[i] ^= 1;
}

static std::atomic<int> mover_stop;
static std::atomic<long> mover_moves;

static void *mover(void *arg) {
  (void)arg;
  CU_OK(cuCtxSetCurrent(ctx));
  for (int i = 0; !mover_stop.load(); i = (i + 1) % MOVE_PAGES, mover_moves++)
    move_page(i);
  return NULL;
}

typedef struct step_result {
  double wall_ms, gpu_ms;
} step_result;

/* One step: `launches` kernels on s, with `moves` page moves on this thread
 * (at the start, before the first launch, or spread from the 16th launch on),
 * then a wait. */
static step_result step(cudaStream_t s, const float *buf, float *sink, int launches, int moves,
                        int at_start) {
  cudaEvent_t e0, e1;
  RT_OK(cudaEventCreate(&e0));
  RT_OK(cudaEventCreate(&e1));
  double t0 = now_us();
  RT_OK(cudaEventRecord(e0, s));
  int done = 0;
  for (int k = 0; k < launches; k++) {
    if (at_start)
      for (; done < moves; done++)
        move_page(done % MOVE_PAGES);
    else if (moves && k >= 16 && done < moves && (k - 16) % ((launches - 16) / moves) == 0)
      move_page(done++ % MOVE_PAGES);
    gather<<<132 * 2048 / 256, 256, 0, s>>>(buf, ((size_t)256 << 20) / 4, 16, sink);
  }
  RT_OK(cudaEventRecord(e1, s));
  RT_OK(cudaEventSynchronize(e1));
  step_result r = {(now_us() - t0) / 1e3, event_ms(e0, e1)};
  RT_OK(cudaEventDestroy(e0));
  RT_OK(cudaEventDestroy(e1));
  return r;
}

static void moves_table(int steps, float *sink) {
  float *buf;
  RT_OK(cudaMalloc((void **)&buf, (size_t)256 << 20));
  RT_OK(cudaMemset(buf, 0, (size_t)256 << 20));
  CU_OK(cuMemAddressReserve(&move_range, 2 * MOVE_PAGES * page_bytes, 0, 0, 0));
  for (int i = 0; i < MOVE_PAGES; i++) {
    CU_OK(cuMemCreate(&move_handle[i], page_bytes, &prop, 0));
    CU_OK(cuMemMap(move_range + i * page_bytes, page_bytes, 0, move_handle[i], 0));
    CU_OK(cuMemSetAccess(move_range + i * page_bytes, page_bytes, &access_desc, 1));
  }
  cudaStream_t s;
  RT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int launches = 400;
  for (int w = 0; w < 3; w++)
    step(s, buf, sink, launches, 0, 0);

  struct row {
    const char *what;
    int moves, at_start, mover_thread;
  } rows[] = {{"no moves", 0, 0, 0},
              {"another thread moving pages without pause", 0, 0, 1},
              {"4 moves on the launching thread, while the GPU is busy", 4, 0, 0},
              {"16 moves on the launching thread, while the GPU is busy", 16, 0, 0},
              {"4 moves on the launching thread at the step's start (the GPU waits)", 4, 1, 0},
              {"16 moves on the launching thread at the step's start (the GPU waits)", 16, 1, 0}};
  const int nr = sizeof rows / sizeof rows[0];
  /* Rows in turn, step by step, so a slow stretch of the machine hits all. */
  std::vector<double> wall[8], gpu[8];
  double mover_rate = 0;
  for (int i = 0; i < steps; i++)
    for (int r = 0; r < nr; r++) {
      pthread_t t;
      double t0 = 0;
      if (rows[r].mover_thread) {
        mover_stop = 0;
        mover_moves = 0;
        if (pthread_create(&t, NULL, mover, NULL) != 0) {
          fprintf(stderr, "bench_vmm_kernels: cannot start the mover thread\n");
          exit(1);
        }
        t0 = now_us();
      }
      step_result sr = step(s, buf, sink, launches, rows[r].moves, rows[r].at_start);
      if (rows[r].mover_thread) {
        double us = now_us() - t0;
        mover_stop = 1;
        pthread_join(t, NULL);
        mover_rate += (double)mover_moves.load() / us * 1e3 / steps;
      }
      wall[r].push_back(sr.wall_ms);
      gpu[r].push_back(sr.gpu_ms);
    }
  double base_wall = median(wall[0]), base_gpu = median(gpu[0]);
  printf("### A step of %d kernels and a wait, with page moves (median of %d steps, the rows in "
         "turn)\n\n",
         launches, steps);
  printf("Another thread moved %.1f pages per ms. \"+ per move\" is the step's extra wall time over "
         "no moves divided by the moves.\n\n",
         mover_rate);
  printf("| step | wall ms | relative | GPU ms (first kernel to last) | relative | + per move, us "
         "|\n|---|---:|---:|---:|---:|---:|\n");
  for (int r = 0; r < nr; r++) {
    double w = median(wall[r]), g = median(gpu[r]);
    printf("| %s | %.3f | %.4f | %.3f | %.4f |", rows[r].what, w, w / base_wall, g, g / base_gpu);
    if (rows[r].moves)
      printf(" %.1f |\n", (w - base_wall) * 1e3 / rows[r].moves);
    else
      printf(" |\n");
  }
  printf("\n");
  CU_OK(cuMemUnmap(move_range, 2 * MOVE_PAGES * page_bytes));
  for (int i = 0; i < MOVE_PAGES; i++)
    CU_OK(cuMemRelease(move_handle[i]));
  CU_OK(cuMemAddressFree(move_range, 2 * MOVE_PAGES * page_bytes));
  RT_OK(cudaStreamDestroy(s));
  RT_OK(cudaFree(buf));
}

int main(int argc, char **argv) {
  int quick = 0, device = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      quick = 1;
    else if (!strcmp(argv[i], "--device") && i + 1 < argc)
      device = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: bench_vmm_kernels [--quick] [--device N]\n");
      return 2;
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device) {
    fprintf(stderr, "bench_vmm_kernels: no CUDA device %d\n", device);
    return 1;
  }
  RT_OK(cudaSetDevice(device));
  RT_OK(cudaFree(0));
  CU_OK(cuCtxGetCurrent(&ctx));
  CU_OK(cuCtxGetDevice(&dev));
  char name[256];
  CU_OK(cuDeviceGetName(name, sizeof name, dev));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  access_desc.location = prop.location;
  access_desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_OK(cuMemGetAllocationGranularity(&page_bytes, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  size_t free_b, total_b;
  RT_OK(cudaMemGetInfo(&free_b, &total_b));
  size_t buffer = (size_t)(quick ? 1 : 4) << 30;
  if (buffer > free_b / 2)
    buffer = free_b / 2 / ((size_t)20 << 20) * ((size_t)20 << 20);
  float *sink;
  RT_OK(cudaMalloc((void **)&sink, sizeof *sink));
  printf("## bench_vmm_kernels, %s\n\n- page (granularity) %zu KiB; buffer %zu MiB\n\n", name,
         page_bytes >> 10, buffer >> 20);
  kernels_table(buffer, quick ? 5 : 11, sink);
  moves_table(quick ? 5 : 15, sink);
  RT_OK(cudaFree(sink));
  return 0;
}
