/* A crew of helper threads that share the page calls of a long run with the
 * thread that asks for them: the maps and unmaps of an expandable pool's
 * pages (pages.c). The driver prices each page's mapping on its own (a run
 * costs what its pages cost one by one: bench/README.md, "bench_vmm"); where
 * the calls of several threads overlap, a run of n pages split into k shares
 * costs the asking thread about one share (bench_vmm's page crew table
 * measures it). The allocating thread waits for the whole run either way:
 * the block is handed out mapped.
 *
 * Self-contained: it knows the backend's vmm calls, nothing of the pool.
 * A crew serves one run at a time; a second thread asking meanwhile, a
 * short run, or a process that forked since the crew started do the calls
 * themselves, exactly as without a crew. */
#ifndef GPUPOOL_PAGE_CREW_H
#define GPUPOOL_PAGE_CREW_H

#include <stddef.h>

#include "backend.h"

/* Pages per share at least: below twice this a run is not split (waking a
 * helper costs a few microseconds; a page's map tens). */
#define PAGE_CREW_SHARE_MIN 4
#define PAGE_CREW_MAX       16 /* helpers */

typedef struct page_crew page_crew;

/* A crew of `helpers` threads (at most PAGE_CREW_MAX) into *out; with 0,
 * *out is NULL, which every call below takes as "no crew". Fewer threads
 * than asked when the system gives fewer (GPUPOOL_OK while at least one
 * started; GPUPOOL_ERR_HOST_OOM with the reason otherwise). */
gpupool_status page_crew_create(unsigned helpers, page_crew **out);
/* Stops and joins the helpers; NULL is a no-op. No run may be under way. */
void page_crew_destroy(page_crew *c);
/* How many helpers c has (0 for NULL). */
unsigned page_crew_size(const page_crew *c);

/* be->ops->vmm->map(be, addr, handles, n), shared: all or none, as the
 * backend's call (a share that failed undoes the others' maps); the
 * status and gpupool_last_error() are those of the first share that failed,
 * by address. */
gpupool_status page_crew_map(page_crew *c, backend *be, void *addr, void *const *handles, size_t n);
/* be->ops->vmm->unmap(be, addr, n), shared: every share runs; the status and
 * gpupool_last_error() are those of the first share that failed, by
 * address. */
gpupool_status page_crew_unmap(page_crew *c, backend *be, void *addr, size_t n);

#endif
