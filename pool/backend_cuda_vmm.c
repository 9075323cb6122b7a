/* Virtual memory management for the cuda backend (backend_vmm_ops in
 * backend.h): address ranges from cuMemAddressReserve, pages of physical
 * memory from cuMemCreate, mapped with cuMemMap and made accessible with
 * cuMemSetAccess. Where the device can, pages are created exportable as POSIX
 * file descriptors (cuMemExportToShareableHandle; another process maps them
 * after cuMemImportFromShareableHandle), for share.c. The driver entry points
 * come through the runtime
 * (cudaGetDriverEntryPointByVersion), never by linking libcuda, so the library
 * still loads on a machine without a driver; there cuda_vmm_ops says no. */
#include "backend_cuda_common.h"

#ifdef GPUPOOL_HAVE_CUDA
#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "core/errors.h"

/* Handles travel through the pool as void *. */
_Static_assert(sizeof(void *) >= sizeof(CUmemGenericAllocationHandle),
               "a CUmemGenericAllocationHandle must fit in a void *");

/* The driver ABI asked for: every function below has kept the ABI it had when
 * it appeared (10.2 at the latest), which is what the _vNNNN typedefs
 * describe. Asking for 12.0 rather than this toolkit's version keeps the
 * lookup working on a driver older than the toolkit (minor version
 * compatibility), where a newer request fails with cudaErrorInvalidValue. */
#define VMM_DRIVER_ABI 12000

typedef struct vmm_driver {
  PFN_cuInit_v2000 init;
  PFN_cuGetErrorName_v6000 get_error_name;
  PFN_cuDeviceGet_v2000 device_get;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute;
  PFN_cuMemGetAllocationGranularity_v10020 get_granularity;
  PFN_cuMemAddressReserve_v10020 address_reserve;
  PFN_cuMemAddressFree_v10020 address_free;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemUnmap_v10020 unmap;
  PFN_cuMemSetAccess_v10020 set_access;
  PFN_cuMemExportToShareableHandle_v10020 export_handle;
  PFN_cuMemImportFromShareableHandle_v10020 import_handle;
} vmm_driver;

static const struct {
  const char *name; /* the base name: the lookup picks the version */
  size_t offset;
} k_symbols[] = {
    {"cuInit", offsetof(vmm_driver, init)},
    {"cuGetErrorName", offsetof(vmm_driver, get_error_name)},
    {"cuDeviceGet", offsetof(vmm_driver, device_get)},
    {"cuDeviceGetAttribute", offsetof(vmm_driver, device_get_attribute)},
    {"cuMemGetAllocationGranularity", offsetof(vmm_driver, get_granularity)},
    {"cuMemAddressReserve", offsetof(vmm_driver, address_reserve)},
    {"cuMemAddressFree", offsetof(vmm_driver, address_free)},
    {"cuMemCreate", offsetof(vmm_driver, create)},
    {"cuMemRelease", offsetof(vmm_driver, release)},
    {"cuMemMap", offsetof(vmm_driver, map)},
    {"cuMemUnmap", offsetof(vmm_driver, unmap)},
    {"cuMemSetAccess", offsetof(vmm_driver, set_access)},
    {"cuMemExportToShareableHandle", offsetof(vmm_driver, export_handle)},
    {"cuMemImportFromShareableHandle", offsetof(vmm_driver, import_handle)},
};

static vmm_driver g_drv;
static int g_drv_ok; /* written once under g_once, read after it */
static char g_drv_error[192];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static _Thread_local char g_reason[256];

static void resolve_once(void) {
#if CUDART_VERSION >= 12050
  for (size_t i = 0; i < sizeof k_symbols / sizeof k_symbols[0]; i++) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    cudaError_t err = cudaGetDriverEntryPointByVersion(k_symbols[i].name, &fn, VMM_DRIVER_ABI,
                                                       cudaEnableDefault, &found);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      snprintf(g_drv_error, sizeof g_drv_error, "cudaGetDriverEntryPointByVersion(%s): %s",
               k_symbols[i].name, cudaGetErrorName(err));
      return;
    }
    if (found != cudaDriverEntryPointSuccess || !fn) {
      snprintf(g_drv_error, sizeof g_drv_error, "the CUDA driver has no %s (ABI %d): %s",
               k_symbols[i].name, VMM_DRIVER_ABI,
               found == cudaDriverEntryPointVersionNotSufficent ? "version not sufficient"
                                                                : "symbol not found");
      return;
    }
    /* POSIX allows a function pointer to travel as a void *. */
    *(void **)((char *)&g_drv + k_symbols[i].offset) = fn;
  }
  g_drv_ok = 1;
#else
  snprintf(g_drv_error, sizeof g_drv_error,
           "built with CUDA %d.%d: cudaGetDriverEntryPointByVersion needs 12.5",
           CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
#endif
}

/* "CUDA_ERROR_OUT_OF_MEMORY", or the number where the driver has no name. */
static const char *cu_error_name(CUresult r) {
  static _Thread_local char unknown[32];
  const char *name = NULL;
  if (g_drv.get_error_name && g_drv.get_error_name(r, &name) == CUDA_SUCCESS && name)
    return name;
  snprintf(unknown, sizeof unknown, "CUresult %d", (int)r);
  return unknown;
}

/* cuda_status for the driver API: CUDA_ERROR_OUT_OF_MEMORY -> OOM, anything
 * else -> BACKEND, with the reason recorded for gpupool_last_error(). */
static gpupool_status cu_status(CUresult r, const char *call, int device, size_t bytes) {
  if (r == CUDA_SUCCESS)
    return GPUPOOL_OK;
  gpupool_status s = r == CUDA_ERROR_OUT_OF_MEMORY ? GPUPOOL_ERR_OOM : GPUPOOL_ERR_BACKEND;
  if (bytes)
    return pool_fail(s, "%s of %zu bytes on device %d: %s", call, bytes, device, cu_error_name(r));
  return pool_fail(s, "%s on device %d: %s", call, device, cu_error_name(r));
}

/* cuda_report_free_error for the driver API; silent once the driver is
 * shutting down. */
static gpupool_status cu_report_free_error(const char *what, int device, CUresult r) {
  if (r == CUDA_SUCCESS || r == CUDA_ERROR_DEINITIALIZED)
    return GPUPOOL_OK;
  /* pool/ prints nothing: the reason is the freeing thread's last error. */
  return pool_fail(GPUPOOL_ERR_BACKEND, "%s on device %d failed: %s", what, device,
                   cu_error_name(r));
}

/* Makes the device current (the guard) and its primary context exist and be
 * current on this thread (cudaFree(NULL), a no-op once it does), so the driver
 * calls that follow find the context the runtime uses. */
static cudaError_t vmm_enter(cuda_device_guard *g, int device) {
  cudaError_t err = cuda_guard_enter(g, device);
  if (err == cudaSuccess)
    err = cudaFree(NULL);
  return err;
}

/* Pinned device memory on `device`, exportable as a POSIX file descriptor
 * when shareable. NVIDIA told PyTorch that requesting the handle type costs no
 * resources (pytorch/pytorch#130890, whose expandable segments request it
 * always); that review also reports slowdowns with old drivers (525). */
static CUmemAllocationProp device_prop(int device, int shareable) {
  CUmemAllocationProp prop = {0};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes =
      shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

static CUdeviceptr dptr(const void *p) {
  return (CUdeviceptr)(uintptr_t)p;
}

static gpupool_status vmm_reserve(backend *b, size_t size, void **base) {
  if (size == 0 || size % b->page_size)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "cuMemAddressReserve on device %d: %zu bytes is not a multiple of the page "
                     "size (%zu)",
                     b->device, size, b->page_size);
  cuda_device_guard g;
  CUdeviceptr ptr = 0;
  CUresult r = CUDA_SUCCESS;
  cudaError_t err = vmm_enter(&g, b->device);
  if (err == cudaSuccess)
    r = g_drv.address_reserve(&ptr, size, b->page_size, 0, 0);
  cuda_guard_leave(&g);
  if (err != cudaSuccess)
    return cuda_status(err, "cuMemAddressReserve", b->device, size);
  if (r != CUDA_SUCCESS)
    return cu_status(r, "cuMemAddressReserve", b->device, size);
  *base = (void *)(uintptr_t)ptr;
  return GPUPOOL_OK;
}

/* The release paths call the driver even where the guard failed (the runtime
 * shutting down at exit, say): these calls name what they free, and a leak is
 * worse than a second error, which goes unreported anyway. */
static void vmm_unreserve(backend *b, void *base, size_t size) {
  cuda_device_guard g;
  cudaError_t err = vmm_enter(&g, b->device);
  CUresult r = g_drv.address_free(dptr(base), size);
  cuda_guard_leave(&g);
  cuda_report_free_error("cuMemAddressFree", b->device, err);
  cu_report_free_error("cuMemAddressFree", b->device, r);
}

static gpupool_status vmm_create(backend *b, void **handles, size_t n) {
  if (n == 0)
    return GPUPOOL_OK;
  CUmemAllocationProp prop = device_prop(b->device, b->shareable);
  cuda_device_guard g;
  CUresult r = CUDA_SUCCESS;
  size_t made = 0;
  cudaError_t err = vmm_enter(&g, b->device);
  if (err == cudaSuccess) {
    for (; made < n; made++) {
      CUmemGenericAllocationHandle h = 0;
      r = g_drv.create(&h, b->page_size, &prop, 0);
      /* A driver that advertises the handle type but refuses it (a
       * container, a virtual GPU): plain pages from now on, and export says
       * UNSUPPORTED. Under the pool's slow lock, as b->shareable wants. */
      if (r != CUDA_SUCCESS && r != CUDA_ERROR_OUT_OF_MEMORY && b->shareable) {
        b->shareable = 0;
        prop = device_prop(b->device, 0);
        r = g_drv.create(&h, b->page_size, &prop, 0);
      }
      if (r != CUDA_SUCCESS)
        break;
      handles[made] = (void *)(uintptr_t)h;
    }
    /* All or none: give back what this call made. */
    if (r != CUDA_SUCCESS)
      for (size_t i = 0; i < made; i++)
        cu_report_free_error("cuMemRelease", b->device,
                             g_drv.release((CUmemGenericAllocationHandle)(uintptr_t)handles[i]));
  }
  cuda_guard_leave(&g);
  if (err != cudaSuccess)
    return cuda_status(err, "cuMemCreate", b->device, b->page_size);
  return cu_status(r, "cuMemCreate", b->device, b->page_size);
}

static void vmm_release(backend *b, void *const *handles, size_t n) {
  if (n == 0)
    return;
  cuda_device_guard g;
  cudaError_t err = vmm_enter(&g, b->device);
  CUresult first = CUDA_SUCCESS;
  for (size_t i = 0; i < n; i++) {
    CUresult r = g_drv.release((CUmemGenericAllocationHandle)(uintptr_t)handles[i]);
    if (first == CUDA_SUCCESS)
      first = r;
  }
  cuda_guard_leave(&g);
  cuda_report_free_error("cuMemRelease", b->device, err);
  cu_report_free_error("cuMemRelease", b->device, first);
}

static gpupool_status vmm_map(backend *b, void *addr, void *const *handles, size_t n) {
  if (n == 0)
    return GPUPOOL_OK;
  const size_t page = b->page_size;
  if (n > SIZE_MAX / page)
    return pool_fail(GPUPOOL_ERR_INVALID, "cuMemMap on device %d: %zu pages overflow", b->device,
                     n);
  const CUdeviceptr base = dptr(addr);
  cuda_device_guard g;
  CUresult r = CUDA_SUCCESS;
  const char *call = "cuMemMap";
  size_t bytes = page, mapped = 0;
  cudaError_t err = vmm_enter(&g, b->device);
  if (err == cudaSuccess) {
    for (; mapped < n; mapped++) {
      r = g_drv.map(base + mapped * page, page, 0,
                    (CUmemGenericAllocationHandle)(uintptr_t)handles[mapped], 0);
      if (r != CUDA_SUCCESS)
        break;
    }
    /* New mappings start inaccessible; one call covers all of them. */
    if (r == CUDA_SUCCESS) {
      CUmemAccessDesc access = {0};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = b->device;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      r = g_drv.set_access(base, n * page, &access, 1);
      call = "cuMemSetAccess";
      bytes = n * page;
    }
    /* All or none: undo the mappings this call made. */
    if (r != CUDA_SUCCESS)
      for (size_t i = 0; i < mapped; i++)
        cu_report_free_error("cuMemUnmap", b->device, g_drv.unmap(base + i * page, page));
  }
  cuda_guard_leave(&g);
  if (err != cudaSuccess)
    return cuda_status(err, "cuMemMap", b->device, n * page);
  return cu_status(r, call, b->device, bytes);
}

/* One cuMemUnmap per page: each page is a mapping of its own, and the driver
 * unmaps only whole mappings. */
static gpupool_status vmm_unmap(backend *b, void *addr, size_t n) {
  if (n == 0)
    return GPUPOOL_OK;
  const CUdeviceptr base = dptr(addr);
  cuda_device_guard g;
  cudaError_t err = vmm_enter(&g, b->device);
  CUresult first = CUDA_SUCCESS;
  for (size_t i = 0; i < n; i++) {
    CUresult r = g_drv.unmap(base + i * b->page_size, b->page_size);
    if (first == CUDA_SUCCESS)
      first = r;
  }
  cuda_guard_leave(&g);
  gpupool_status st = cuda_report_free_error("cuMemUnmap", b->device, err);
  return st != GPUPOOL_OK ? st : cu_report_free_error("cuMemUnmap", b->device, first);
}

/* The caller checked b->shareable; a page created before the driver refused
 * shareable ones exports, a later one does not (UNSUPPORTED). */
static gpupool_status vmm_export_page(backend *b, void *h, int *fd, uint64_t *offset) {
  cuda_device_guard g;
  CUresult r = CUDA_SUCCESS;
  int out = -1;
  cudaError_t err = vmm_enter(&g, b->device);
  if (err == cudaSuccess)
    r = g_drv.export_handle(&out, (CUmemGenericAllocationHandle)(uintptr_t)h,
                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  cuda_guard_leave(&g);
  if (err != cudaSuccess)
    return cuda_status(err, "cuMemExportToShareableHandle", b->device, 0);
  if (r == CUDA_ERROR_NOT_SUPPORTED || r == CUDA_ERROR_INVALID_VALUE) /* a page made plain */
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "cuMemExportToShareableHandle on device %d: %s (the page is not exportable)",
                     b->device, cu_error_name(r));
  if (r != CUDA_SUCCESS)
    return cu_status(r, "cuMemExportToShareableHandle", b->device, 0);
  *fd = out;
  *offset = 0; /* one descriptor per page */
  return GPUPOOL_OK;
}

/* The imported handle is released once mapped: the mapping keeps the memory. */
static gpupool_status vmm_map_shared(backend *b, void *addr, int fd, uint64_t offset) {
  if (offset != 0)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "cuMemImportFromShareableHandle on device %d: a CUDA page starts at offset "
                     "0 of its descriptor, not %llu",
                     b->device, (unsigned long long)offset);
  cuda_device_guard g;
  CUresult r = CUDA_SUCCESS;
  const char *call = "cuMemImportFromShareableHandle";
  cudaError_t err = vmm_enter(&g, b->device);
  if (err == cudaSuccess) {
    CUmemGenericAllocationHandle h = 0;
    r = g_drv.import_handle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r == CUDA_SUCCESS) {
      call = "cuMemMap";
      r = g_drv.map(dptr(addr), b->page_size, 0, h, 0);
      if (r == CUDA_SUCCESS) {
        CUmemAccessDesc access = {0};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = b->device;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        call = "cuMemSetAccess";
        r = g_drv.set_access(dptr(addr), b->page_size, &access, 1);
        if (r != CUDA_SUCCESS)
          cu_report_free_error("cuMemUnmap", b->device, g_drv.unmap(dptr(addr), b->page_size));
      }
      cu_report_free_error("cuMemRelease", b->device, g_drv.release(h));
    }
  }
  cuda_guard_leave(&g);
  if (err != cudaSuccess)
    return cuda_status(err, call, b->device, b->page_size);
  return cu_status(r, call, b->device, b->page_size);
}

static const backend_vmm_ops cuda_vmm = {
    .reserve = vmm_reserve,
    .unreserve = vmm_unreserve,
    .create = vmm_create,
    .release = vmm_release,
    .map = vmm_map,
    .unmap = vmm_unmap,
    .export_page = vmm_export_page,
    .map_shared = vmm_map_shared,
};

/* Records why cuda_vmm_ops says no (cuda_vmm_unavailable_reason). */
__attribute__((format(printf, 1, 2))) static const backend_vmm_ops *unavailable(const char *fmt,
                                                                                ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_reason, sizeof g_reason, fmt, ap);
  va_end(ap);
  return NULL;
}

/* The page size: the recommended granularity, when it is a power of two and
 * a multiple of the minimum one (cuMemCreate and cuMemMap need multiples of the
 * minimum; cuMemAddressReserve needs a power-of-two alignment). */
static CUresult query_page_size(int device, int shareable, size_t *page) {
  const CUmemAllocationProp prop = device_prop(device, shareable);
  size_t minimum = 0, recommended = 0;
  CUresult r = g_drv.get_granularity(&minimum, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r == CUDA_SUCCESS)
    r = g_drv.get_granularity(&recommended, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r == CUDA_SUCCESS)
    *page = recommended;
  if (r == CUDA_SUCCESS && (minimum == 0 || recommended == 0 || recommended % minimum ||
                            (recommended & (recommended - 1))))
    *page = 0;
  return r;
}

const backend_vmm_ops *cuda_vmm_ops(int device, size_t *page_size, int *shareable) {
  *page_size = 0;
  *shareable = 0;
  g_reason[0] = '\0';
  pthread_once(&g_once, resolve_once);
  if (!g_drv_ok)
    return unavailable("device %d: %s", device, g_drv_error);

  CUdevice dev = 0;
  int supported = 0;
  const char *call = "cuInit";
  CUresult r = g_drv.init(0); /* done by the runtime already: a no-op */
  if (r == CUDA_SUCCESS) {
    call = "cuDeviceGet";
    r = g_drv.device_get(&dev, device);
  }
  if (r == CUDA_SUCCESS) {
    call = "cuDeviceGetAttribute";
    r = g_drv.device_get_attribute(&supported,
                                   CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev);
  }
  if (r != CUDA_SUCCESS)
    return unavailable("device %d: %s: %s", device, call, cu_error_name(r));
  if (!supported)
    return unavailable("device %d: %s", device, "no virtual memory management support");
  int fd_ok = 0; /* an error reads as "not supported": plain pages */
  if (g_drv.device_get_attribute(&fd_ok,
                                 CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                                 dev) != CUDA_SUCCESS)
    fd_ok = 0;

  /* The granularity needs no context; should a driver want one, ask again
   * with the device's primary context current. */
  size_t page = 0;
  r = query_page_size(device, fd_ok, &page);
  if (r != CUDA_SUCCESS) {
    cuda_device_guard g;
    cudaError_t err = vmm_enter(&g, device);
    if (err == cudaSuccess)
      r = query_page_size(device, fd_ok, &page);
    cuda_guard_leave(&g);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      return unavailable("device %d: no context for cuMemGetAllocationGranularity: %s", device,
                         cudaGetErrorName(err));
    }
  }
  if (r != CUDA_SUCCESS)
    return unavailable("device %d: cuMemGetAllocationGranularity: %s", device, cu_error_name(r));
  if (page == 0 || (page & (page - 1))) /* pages.h finds a page by a shift */
    return unavailable("device %d: allocation granularity %zu is not a power of two", device, page);
  *page_size = page;
  *shareable = fd_ok != 0;
  return &cuda_vmm;
}

const char *cuda_vmm_unavailable_reason(void) {
  return g_reason;
}

#endif
