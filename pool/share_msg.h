/* The messages of block sharing (pool/share.c) as they cross the Unix
 * socket: one fixed-size record each, descriptors attached with SCM_RIGHTS.
 * Both ends run on one machine, with one ABI. */
#ifndef GPUPOOL_SHARE_MSG_H
#define GPUPOOL_SHARE_MSG_H

#include <stdint.h>

#define SHARE_MAGIC     0x48535047u /* "GPSH" */
#define SHARE_VERSION   1
#define SHARE_FDS       64                  /* descriptors per message (Linux allows 253) */
#define SHARE_MAX_PAGES ((uint32_t)1 << 20) /* a bound for what a message may claim */

/* An export is MSG_EXPORT (the header and the first pages), then MSG_PAGES
 * until every page is sent, or MSG_ABORT when the exporter failed after
 * its first message; the importer answers MSG_RELEASE when done. */
enum { MSG_EXPORT = 1, MSG_PAGES = 2, MSG_RELEASE = 3, MSG_ABORT = 4 };

typedef struct share_msg {
  uint32_t magic;
  uint16_t version, kind;
  uint64_t id;      /* of the export */
  char backend[16]; /* "cuda" or "host" */
  uint64_t size;    /* the block's requested bytes */
  uint64_t offset;  /* where the block starts in its first page */
  uint64_t page_size;
  uint32_t npages; /* of the export */
  uint32_t first;  /* the export's page index of this message's first descriptor */
  uint32_t nfds;   /* descriptors with this message */
  uint32_t reserved;
  uint64_t page_offset[SHARE_FDS]; /* where each page starts in its descriptor */
} share_msg;

#endif
