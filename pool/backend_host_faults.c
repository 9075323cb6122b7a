/* gpupool_host_inject_faults (gpupool/host.h): run-time fault injection on
 * the host backend of a pool. Apart from backend_host.c so that the backend
 * does not depend on the pool. */
#include "backend.h"
#include "core/errors.h"
#include "gpupool/host.h"
#include "pool_view.h"

gpupool_status gpupool_host_inject_faults(gpupool *p, unsigned every_n, double rate,
                                          uint64_t seed) {
  if (!p)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_host_inject_faults: NULL pool");
  gpupool_status st = pool_check_not_inherited(p, "gpupool_host_inject_faults");
  if (st != GPUPOOL_OK)
    return st;
  if (!(rate >= 0.0 && rate <= 1.0)) /* NaN too */
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_host_inject_faults: rate %g outside [0, 1]",
                     rate);
  backend *b = pool_get_backend(p);
  if (!backend_is_host(b))
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "gpupool_host_inject_faults: pool \"%s\" uses backend %s, not host",
                     gpupool_name(p), b ? b->name : "none");
  backend_host_set_faults(b, every_n, rate, seed);
  return GPUPOOL_OK;
}

gpupool_status gpupool_host_hold_other(gpupool *p, size_t bytes) {
  if (!p)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_host_hold_other: NULL pool");
  gpupool_status st = pool_check_not_inherited(p, "gpupool_host_hold_other");
  if (st != GPUPOOL_OK)
    return st;
  backend *b = pool_get_backend(p);
  if (!backend_is_host(b))
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "gpupool_host_hold_other: pool \"%s\" uses backend %s, not host",
                     gpupool_name(p), b ? b->name : "none");
  return backend_host_set_other(b, bytes);
}
