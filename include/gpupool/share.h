/* Sharing a block of an expandable pool with another process.
 *
 * The exporter hands a live block of a pool with expandable_segments:True to
 * a connected Unix socket (SOCK_STREAM or SOCK_SEQPACKET): its pages travel
 * as POSIX file descriptors (SCM_RIGHTS; cuMemExportToShareableHandle on the
 * cuda backend). The importer maps them into an address range of its own
 * (cuMemImportFromShareableHandle, cuMemMap, cuMemSetAccess) and gets a
 * device pointer to the same memory. Lifetime (docs/pool.md, "Sharing a
 * block"):
 *
 * - While exported, the block's pages stay mapped where they are: they never
 *   move to other blocks and are never released.
 * - gpupool_free of an exported block succeeds and is deferred: it counts as
 *   a free at once, as a free after record_stream does (num_frees; the block
 *   leaves allocated_bytes and stays in active_bytes, a pending free), and
 *   the block returns to the pool when the export ends (after the work of
 *   streams recorded on it before the export). A second free is an error.
 * - The export ends when the importer releases it (a message on the socket)
 *   or closes its end of the socket (or exits); the exporter learns it in
 *   gpupool_share_wait. End every export before gpupool_destroy: destroying
 *   the pool orphans them (the pool's memory goes; gpupool_share_wait then
 *   ends them at once, *ended = 1).
 * - One export per block and per socket at a time; one import per socket at
 *   a time in a process (a second import of the same export is refused). A
 *   socket is what the descriptor names: a dup(2) of it is the same socket.
 *
 * Failures: GPUPOOL_ERR_UNSUPPORTED where the device or driver cannot export
 * memory as file descriptors (or gpupool was built without CUDA and the
 * export came from a cuda pool); GPUPOOL_ERR_INVALID for a pool without
 * expandable segments, a small block (small blocks share a 2 MiB segment), a
 * foreign or freed pointer, a socket that is not a Unix stream or seqpacket
 * socket, one that is not connected, one whose peer closed it (each with
 * its own reason), a second export or import, and anything on the
 * socket that is not the expected message; GPUPOOL_ERR_HOST_OOM when host
 * memory runs out (nothing sent, the block still the caller's);
 * GPUPOOL_ERR_BACKEND when the driver or the system fails, or a wait on the
 * socket runs past its SO_SNDTIMEO / SO_RCVTIMEO ("timed out").
 * gpupool_last_error() says which, in one line.
 *
 * Waiting: export and import wait on the socket (for room to send, for the
 * next message) as long as it takes, as blocking calls do, or at most the
 * socket's SO_SNDTIMEO / SO_RCVTIMEO for each message when it is set:
 * setsockopt(2) it for a bounded wait. A timed-out call leaves part of a
 * message on the socket: close it. */
#ifndef GPUPOOL_SHARE_H
#define GPUPOOL_SHARE_H

#include "gpupool/gpupool.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct gpupool_export gpupool_export;
typedef struct gpupool_import gpupool_import;

/* Exports the live block at ptr (the pointer gpupool_malloc returned) of pool
 * p over sock. On success *out tracks the export until it ends. It holds at
 * most 64 of the pages' descriptors open at a time, whatever the block's
 * size. A failure after the first message sends an abort: the import fails
 * at once. */
gpupool_status gpupool_share_export(gpupool *p, void *ptr, int sock, gpupool_export **out);

/* Waits up to timeout_ms (0: does not wait; -1: until it happens; below -1:
 * GPUPOOL_ERR_INVALID) for the importer to end the export. *ended = 1 when
 * it did: ex is freed, and the block is the exporter's again (or back in the
 * pool, if it was freed while exported). *ended = 0 when it is still
 * imported, or when the call fails
 * (the export goes on: call again). The timeout holds even when the
 * importer's message comes in parts: the part received is kept for the next
 * call. */
gpupool_status gpupool_share_wait(gpupool_export *ex, int timeout_ms, int *ended);

/* Receives an export from sock (blocking until it arrives, or each message
 * up to the socket's SO_RCVTIMEO) and maps it on CUDA device `device` (any
 * value on the host backend): *ptr is the block, *size its requested bytes. */
gpupool_status gpupool_share_import(int sock, int device, void **ptr, size_t *size,
                                    gpupool_import **out);

/* Unmaps the imported block and tells the exporter (if its socket is still
 * open); im is freed. Use of the memory must have finished (synchronize). */
gpupool_status gpupool_share_release(gpupool_import *im);

#ifdef __cplusplus
}
#endif
#endif
