/* Sharing a block of an expandable pool with another process
 * (include/gpupool/share.h). The exporter sends the block's pages as file
 * descriptors over a Unix socket (SCM_RIGHTS), in fixed-size messages of up
 * to SHARE_FDS pages each; the importer maps them into an address range of its
 * own through a backend of the kind that exported them, and sends a release
 * message when done. While exported, a block is out of its shard's live map
 * and listed here: it stays allocated, so its pages never move (only pages
 * wholly under free blocks do) and are never released. */
#include "gpupool/share.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/errors.h"
#include "pages.h"
#include "pool_internal.h"
#include "pool_view.h"
#include "share.h"
#include "share_msg.h"
#include "shard.h"
#include "sizeclass.h"

/* Which socket a descriptor is: its number may be closed and reused for
 * another, and a dup(2) of it is the same socket under another number. */
typedef struct sock_id {
  dev_t dev;
  ino_t ino;
} sock_id;

/* A message being received: a stream socket may deliver it in parts, and
 * gpupool_share_wait may return before the last part comes. */
typedef struct share_rx {
  share_msg m;
  size_t got; /* bytes of m received so far */
} share_rx;

struct gpupool_export {
  gpupool *p;
  block *b;
  int sock, seqpacket;
  sock_id sid;
  uint64_t id;
  int sending; /* its pages are being sent: the caller has no handle yet */
  int freed;   /* gpupool_free was called while exported */
  share_rx rx; /* the importer's message, as far as it came */
  gpupool_export *next;
};

struct gpupool_import {
  backend *be;
  void *base;
  size_t npages;
  int sock;
  sock_id sid;
  uint64_t id;
  gpupool_import *next;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER; /* both lists */
static gpupool_export *g_exports;
static gpupool_import *g_imports;
static _Atomic uint64_t g_next_id;

/* fork(): the lists are the parent's (its pools, sockets and mappings), and a
 * thread of the parent may have held g_lock at the fork (an export holds it
 * while it takes the block): the child starts with the lock anew and empty
 * lists, and its copies of the parent's exports are orphans, as if their
 * pools were destroyed, so that ending one touches no parent's pool. */
static void forget_parent_shares_in_child(void) {
  pthread_mutex_init(&g_lock, NULL);
  for (gpupool_export *e = g_exports; e; e = e->next) {
    e->p = NULL;
    e->b = NULL;
  }
  g_exports = NULL;
  g_imports = NULL;
}

static void register_atfork(void) {
  pthread_atfork(NULL, NULL, forget_parent_shares_in_child);
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static uint64_t new_id(void) {
  return ((uint64_t)getpid() << 40) ^ (clock_monotonic_ns() << 8) ^ ++g_next_id;
}

/* A socket error as a status: the caller's socket is bad, never connected
 * or its peer gone (INVALID), or the system failed (BACKEND). */
static gpupool_status socket_fail(const char *call, int sock, const char *what, int err) {
  if (err == EPIPE || err == ECONNRESET)
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: socket %d: %s failed: the peer closed the socket",
                     call, sock, what);
  if (err == ENOTCONN)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: socket %d is not connected (connect or accept it, or use socketpair)",
                     call, sock);
  if (err == EBADF || err == ENOTSOCK)
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: %d is not %s", call, sock,
                     err == EBADF ? "an open descriptor" : "a socket");
  return pool_fail(GPUPOOL_ERR_BACKEND, "%s: socket %d: %s failed: %s", call, sock, what,
                   strerror(err));
}

static int identify(int sock, sock_id *id) {
  struct stat st;
  if (fstat(sock, &st) != 0)
    return -1;
  *id = (sock_id){st.st_dev, st.st_ino};
  return 0;
}

static int same_socket(sock_id a, sock_id b) {
  return a.dev == b.dev && a.ino == b.ino;
}

/* Whether sock is still the socket id (not closed, nor reused for another). */
static int still_socket(int sock, sock_id id) {
  sock_id now;
  return identify(sock, &now) == 0 && same_socket(now, id);
}

/* A connected Unix socket of a type that keeps messages whole and in order;
 * *seqpacket says which, *id which socket it is. */
static gpupool_status check_socket(const char *call, int sock, int *seqpacket, sock_id *id) {
  int domain = 0, type = 0;
  socklen_t len = sizeof domain;
  if (getsockopt(sock, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0)
    return socket_fail(call, sock, "getsockopt", errno);
  len = sizeof type;
  if (getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &len) != 0)
    return socket_fail(call, sock, "getsockopt", errno);
  if (domain != AF_UNIX || (type != SOCK_STREAM && type != SOCK_SEQPACKET))
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: socket %d is not a Unix stream or seqpacket socket (file descriptors "
                     "travel only over AF_UNIX)",
                     call, sock);
  /* Never connected (or a listening socket): said so here, where a receive
   * would fail with EINVAL. A peer that closed its end still has a name. */
  struct sockaddr_storage peer;
  len = sizeof peer;
  if (getpeername(sock, (struct sockaddr *)&peer, &len) != 0)
    return socket_fail(call, sock, "getpeername", errno);
  if (identify(sock, id) != 0)
    return socket_fail(call, sock, "fstat", errno);
  *seqpacket = type == SOCK_SEQPACKET;
  return GPUPOOL_OK;
}

/* Deadlines are monotonic nanoseconds; every wait of the protocol has one.
 * NO_DEADLINE waits as long as it takes. */
#define NO_DEADLINE UINT64_MAX

static uint64_t deadline_after(int64_t ms) {
  return ms < 0 ? NO_DEADLINE : clock_monotonic_ns() + (uint64_t)ms * 1000000u;
}

/* The deadline for one message that the socket's SO_RCVTIMEO or SO_SNDTIMEO
 * (opt) sets from now, as it would for a blocking call: none when unset. */
static uint64_t socket_deadline(int sock, int opt) {
  struct timeval tv = {0, 0};
  socklen_t len = sizeof tv;
  if (getsockopt(sock, SOL_SOCKET, opt, &tv, &len) != 0 || (tv.tv_sec <= 0 && tv.tv_usec <= 0))
    return NO_DEADLINE;
  return deadline_after((int64_t)tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
}

static gpupool_status timed_out(const char *call, int sock, const char *what, int opt) {
  return pool_fail(GPUPOOL_ERR_BACKEND, "%s: socket %d: %s timed out (its %s)", call, sock, what,
                   opt == SO_RCVTIMEO ? "SO_RCVTIMEO" : "SO_SNDTIMEO");
}

/* Waits until sock is ready for `events` (the socket's calls are all made
 * with MSG_DONTWAIT) or the deadline passes: 1 ready, 0 the deadline
 * passed, -1 poll failed (errno; EBADF for a descriptor closed meanwhile). */
static int wait_ready(int sock, short events, uint64_t deadline) {
  for (;;) {
    int ms = -1;
    if (deadline != NO_DEADLINE) {
      uint64_t now = clock_monotonic_ns();
      if (now >= deadline)
        return 0;
      uint64_t left = (deadline - now + 999999) / 1000000;
      ms = left > INT_MAX ? INT_MAX : (int)left;
    }
    struct pollfd pfd = {sock, events, 0};
    int r = poll(&pfd, 1, ms);
    if (r > 0 && (pfd.revents & POLLNVAL)) {
      errno = EBADF;
      return -1;
    }
    if (r > 0)
      return 1;
    if (r < 0 && errno != EINTR)
      return -1;
  }
}

/* Sends m, waiting for room until the deadline. */
static gpupool_status send_msg(const char *call, int sock, const share_msg *m, const int *fds,
                               uint64_t deadline) {
  union {
    char buf[CMSG_SPACE(SHARE_FDS * sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {(void *)m, sizeof *m};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (m->nfds) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE(m->nfds * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(m->nfds * sizeof(int));
    memcpy(CMSG_DATA(c), fds, m->nfds * sizeof(int));
  }
  for (size_t done = 0; done < sizeof *m;) {
    ssize_t r = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int w = wait_ready(sock, POLLOUT, deadline);
      if (w == 0)
        return timed_out(call, sock, "sending a message", SO_SNDTIMEO);
      if (w < 0)
        return socket_fail(call, sock, "poll", errno);
      continue;
    }
    if (r < 0 && errno == ETOOMANYREFS) {
      /* More descriptors in flight (sent, not yet received) than the
       * sender's RLIMIT_NOFILE, for a user without CAP_SYS_RESOURCE: room
       * comes as the importer receives; poll cannot say when. */
      if (deadline != NO_DEADLINE && clock_monotonic_ns() >= deadline)
        return timed_out(call, sock, "sending a message", SO_SNDTIMEO);
      nanosleep(&(struct timespec){0, 1000000}, NULL);
      continue;
    }
    if (r < 0)
      return socket_fail(call, sock, "sendmsg", errno);
    done += (size_t)r;
    iov.iov_base = (char *)m + done; /* the descriptors went with the first bytes */
    iov.iov_len = sizeof *m - done;
    mh.msg_control = NULL;
    mh.msg_controllen = 0;
  }
  return GPUPOOL_OK;
}

static void close_fds(int *fds, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (fds[i] >= 0)
      close(fds[i]);
}

/* Receives one message into rx->m, going on from what rx holds, and the
 * descriptors that come with it: at most max into fds, *nfds of them (the
 * caller closes them); with fds NULL any are closed at once. Waits for data
 * until the deadline. 1: a message (rx->got is 0 again); 0: the peer
 * closed the socket before one began; 2: the deadline passed first, rx
 * keeps the part received (the part's descriptors were closed); 3 (only
 * with fds): a whole message in rx->m, but the kernel dropped some of its
 * descriptors because this process is at its open-file limit (none kept,
 * *st says so); -1: *st says why (a truncated message, bytes that are no
 * message of ours, a socket error). */
static int recv_msg(const char *call, int sock, int seqpacket, share_rx *rx, int *fds, size_t max,
                    size_t *nfds, uint64_t deadline, gpupool_status *st) {
  union {
    char buf[CMSG_SPACE(SHARE_FDS * sizeof(int))];
    struct cmsghdr align;
  } ctl;
  share_msg *m = &rx->m;
  size_t unused = 0;
  int lost_fds = 0, at_fd_limit = 0;
  if (!fds)
    nfds = &unused;
  *nfds = 0;
  while (rx->got < sizeof *m) {
    size_t got = rx->got;
    struct iovec iov = {(char *)m + got, sizeof *m - got};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    mh.msg_control = ctl.buf;
    mh.msg_controllen = sizeof ctl.buf;
    ssize_t r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      int w = wait_ready(sock, POLLIN, deadline);
      if (w > 0)
        continue;
      if (fds)
        close_fds(fds, *nfds);
      *nfds = 0;
      if (w == 0)
        return 2;
      rx->got = 0;
      *st = socket_fail(call, sock, "poll", errno);
      return -1;
    }
    if (r < 0 && errno == ECONNRESET && got == 0 && *nfds == 0)
      return 0; /* the peer went away: as closed */
    if (r < 0) {
      if (fds)
        close_fds(fds, *nfds);
      *nfds = 0;
      rx->got = 0;
      *st = socket_fail(call, sock, "recvmsg", errno);
      return -1;
    }
    size_t carried = 0; /* the descriptors this part brought */
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        continue;
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      carried += n;
      for (size_t i = 0; i < n; i++) {
        int fd;
        memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (!fds)
          close(fd);
        else if (*nfds < max)
          fds[(*nfds)++] = fd;
        else {
          close(fd);
          lost_fds = 1;
        }
      }
    }
    /* Truncated control data: more descriptors than the buffer holds (a
     * full buffer, more than a message carries), or fewer than it holds,
     * which the kernel does only when it cannot install them: the
     * process's RLIMIT_NOFILE. */
    if ((mh.msg_flags & MSG_CTRUNC) && carried >= SHARE_FDS)
      lost_fds = 1;
    else if (mh.msg_flags & MSG_CTRUNC)
      at_fd_limit = 1;
    if (r == 0 && got == 0 && *nfds == 0 && !lost_fds && !at_fd_limit)
      return 0;
    got += (size_t)r;
    rx->got = got;
    const char *bad = NULL;
    if (r == 0)
      bad = "the socket closed in the middle of a message";
    else if (got >= sizeof m->magic && m->magic != SHARE_MAGIC)
      bad = "bytes that are not a gpupool share message";
    else if (seqpacket && (got < sizeof *m || (mh.msg_flags & MSG_TRUNC)))
      bad = "a message of the wrong size";
    else if (lost_fds)
      bad = "more file descriptors than a message carries";
    if (bad) {
      *st = pool_fail(GPUPOOL_ERR_INVALID, "%s: socket %d: %s", call, sock, bad);
      if (fds)
        close_fds(fds, *nfds);
      *nfds = 0;
      rx->got = 0;
      return -1;
    }
  }
  rx->got = 0;
  if (at_fd_limit && fds) {
    close_fds(fds, *nfds);
    *nfds = 0;
    struct rlimit lim;
    char limit[32] = "unknown";
    if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY)
      snprintf(limit, sizeof limit, "%llu", (unsigned long long)lim.rlim_cur);
    *st = pool_fail(GPUPOOL_ERR_BACKEND,
                    "%s: socket %d: the kernel dropped descriptors of the message: this process "
                    "has too many files open (RLIMIT_NOFILE %s; an import needs %d free)",
                    call, sock, limit, SHARE_FDS);
    return 3;
  }
  return 1;
}

/* Sends a message of `kind` about export id, on behalf of a call that has
 * its outcome already: the call's gpupool_last_error() stays. One that
 * cannot be sent needs none: a socket that failed or closed tells the peer
 * the same (a release: the importer is done; an abort: the export failed). */
static void send_quietly(int sock, int kind, uint64_t id, uint64_t deadline) {
  pool_error_scope scope; /* left as succeeded: the call's reason is put back */
  pool_error_scope_enter(&scope);
  share_msg m = {.magic = SHARE_MAGIC, .version = SHARE_VERSION, .kind = (uint16_t)kind, .id = id};
  gpupool_status st = send_msg("gpupool_share", sock, &m, NULL, deadline);
  (void)st;
  pool_error_scope_leave(&scope, GPUPOOL_OK);
}

static void send_release(int sock, uint64_t id) {
  send_quietly(sock, MSG_RELEASE, id, socket_deadline(sock, SO_SNDTIMEO));
}

/* ---- exporting ---- */

/* The live block at ptr, with its shard locked; NULL if none. */
static block *find_live(gpupool *p, uintptr_t ptr, shard **out) {
  for (shard *sh = atomic_load(&p->shards); sh; sh = sh->next_shard) {
    spin_lock(&sh->lock);
    addrmap_entry *e = addrmap_find(&sh->live, ptr);
    if (e) {
      *out = sh;
      return e->val;
    }
    spin_unlock(&sh->lock);
  }
  return NULL;
}

/* The export's block returns: to its shard's live map, or, if it was freed
 * while exported (counted then), to the pool. Under g_lock; ex's pool alive. */
static void return_block(gpupool_export *ex) {
  block *b = ex->b;
  shard *sh = b->seg->sh;
  spin_lock(&sh->lock);
  if (ex->freed) {
    shard_end_held_free(sh, b);
    addrmap_give_up_room(&sh->live);
  } else
    addrmap_put_back(&sh->live, b->addr, b);
  spin_unlock(&sh->lock);
}

static void unlist_export(gpupool_export *ex) {
  for (gpupool_export **l = &g_exports; *l; l = &(*l)->next)
    if (*l == ex) {
      *l = ex->next;
      break;
    }
}

/* The export of ptr, from the moment its block left the live map (before
 * its pages are sent) until it ends. */
static gpupool_export *find_export(gpupool *p, uintptr_t ptr) {
  for (gpupool_export *e = g_exports; e; e = e->next)
    if (e->p == p && e->b && e->b->addr == ptr)
      return e;
  return NULL;
}

/* A backend's failure (its status st, its words in gpupool_last_error())
 * under the name of the share call that met it, as the call's own failures
 * are worded: "gpupool_share_import: host backend: ...". */
static gpupool_status backend_failed(const char *call, gpupool_status st) {
  const char *e = gpupool_last_error();
  size_t n = strlen(call);
  if (strncmp(e, call, n) == 0 && e[n] == ':')
    return st;
  char why[POOL_ERROR_MAX];
  snprintf(why, sizeof why, "%s", e);
  return pool_fail(st, "%s: %s", call, why);
}

/* Sends the export whose header is hdr, pages h[0..n): a message of up to
 * SHARE_FDS pages at a time, each page exported (a new descriptor) just
 * before its message and closed once sent, so that no more than SHARE_FDS
 * descriptors are open at once however large the block (a descriptor per
 * page for all of them at once ran into RLIMIT_NOFILE: 1024 pages, 2 GiB,
 * under a common default). A failure after the first message is followed
 * by an abort, so that the importer fails at once instead of waiting for
 * pages that never come. */
static gpupool_status send_pages(backend *be, const share_msg *hdr, void *const *h, size_t n,
                                 int sock) {
  const char *call = "gpupool_share_export";
  share_msg m = *hdr;
  int fds[SHARE_FDS];
  gpupool_status st = GPUPOOL_OK;
  size_t sent = 0; /* messages */
  for (size_t first = 0; first < n && st == GPUPOOL_OK; first += SHARE_FDS) {
    size_t k = n - first < SHARE_FDS ? n - first : SHARE_FDS, made = 0;
    for (; made < k && st == GPUPOOL_OK; made++)
      st = be->ops->vmm->export_page(be, h[first + made], &fds[made], &m.page_offset[made]);
    if (st != GPUPOOL_OK) {
      backend_failed(call, st);
      made--; /* the failed one made no descriptor */
    } else {
      m.kind = first ? MSG_PAGES : MSG_EXPORT;
      m.first = (uint32_t)first;
      m.nfds = (uint32_t)k;
      st = send_msg(call, sock, &m, fds, socket_deadline(sock, SO_SNDTIMEO));
      sent += st == GPUPOOL_OK;
    }
    close_fds(fds, made); /* the importer has its own copies */
  }
  if (st != GPUPOOL_OK && sent)
    send_quietly(sock, MSG_ABORT, m.id, deadline_after(0));
  return st;
}

gpupool_status gpupool_share_export(gpupool *p, void *ptr, int sock, gpupool_export **out) {
  const char *call = "gpupool_share_export";
  pthread_once(&atfork_once, register_atfork);
  if (!p || !ptr || !out)
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: %s is NULL", call,
                     !p     ? "pool"
                     : !ptr ? "ptr"
                            : "out");
  *out = NULL;
  gpupool_status inherited = pool_check_not_inherited(p, call);
  if (inherited != GPUPOOL_OK)
    return inherited;
  if (!p->cfg.expandable)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: pool '%s' has no expandable segments: only blocks of a pool with "
                     "expandable_segments:True can be shared",
                     call, p->cfg.name);
  const backend_vmm_ops *vmm = p->be->ops->vmm;
  if (!vmm || !vmm->export_page)
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED, "%s: backend %s cannot share memory", call,
                     p->be->name);
  int seqpacket;
  sock_id sid;
  gpupool_status st = check_socket(call, sock, &seqpacket, &sid);
  if (st != GPUPOOL_OK)
    return st;
  gpupool_export *ex = calloc(1, sizeof *ex);
  if (!ex)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", call);

  pthread_mutex_lock(&g_lock);
  for (gpupool_export *e = g_exports; e && st == GPUPOOL_OK; e = e->next) {
    if (same_socket(e->sid, sid))
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: socket %d carries another export already (one at a time: wait for it "
                     "to end)",
                     call, sock);
    else if (e->p == p && e->b && e->b->addr == (uintptr_t)ptr)
      st = pool_fail(GPUPOOL_ERR_INVALID, "%s: pool '%s': %p is exported already%s", call,
                     p->cfg.name, ptr, e->freed ? " and was freed" : "");
  }
  /* The slow lock keeps segments and page tables still while they are read. */
  shard *sh = NULL;
  block *b = NULL;
  void **h = NULL;
  size_t n = 0;
  share_msg hdr = {.magic = SHARE_MAGIC, .version = SHARE_VERSION, .id = new_id()};
  if (st == GPUPOOL_OK) {
    pthread_mutex_lock(&p->slow_lock);
    b = find_live(p, (uintptr_t)ptr, &sh);
    if (!b)
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: pool '%s': %p is not a live allocation of this pool (a foreign or "
                     "interior pointer, or a freed block)",
                     call, p->cfg.name, ptr);
    else if (!p->be->shareable) /* read under the slow lock, as the backend wants */
      st = pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "%s: pool '%s': device %d cannot export memory as POSIX file descriptors "
                     "(no CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, or the "
                     "driver refused shareable pages)",
                     call, p->cfg.name, p->be->device);
    else if (!b->seg->pages || !b->seg->large || b->size <= SMALL_SIZE) /* or in the range */
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: pool '%s': %p is a small block (%zu bytes): small blocks share their "
                     "2 MiB page with other blocks, which cannot be shared; blocks over 1 MiB "
                     "can",
                     call, p->cfg.name, ptr, b->size);
    else {
      const segment *seg = b->seg;
      size_t first = page_of(seg, b->addr);
      n = page_of(seg, b->addr + b->size - 1) - first + 1;
      if (n > SHARE_MAX_PAGES)
        st = pool_fail(GPUPOOL_ERR_INVALID, "%s: %p spans %zu pages, more than %u", call, ptr, n,
                       SHARE_MAX_PAGES);
      else if (!(h = malloc(n * sizeof *h)))
        st = pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", call);
      else {
        /* Out of the live map before its pages go: a free from now on is
         * deferred (share_claims), as for an export made. Its room stays,
         * so that it can come back without host memory (return_block). */
        addrmap_take(&sh->live, addrmap_find(&sh->live, (uintptr_t)ptr));
        for (size_t i = 0; i < n; i++)
          h[i] = page_handle(seg, first + i);
        hdr.size = b->requested;
        hdr.offset = (b->addr - seg->addr) % seg->page_size;
        hdr.page_size = seg->page_size;
        hdr.npages = (uint32_t)n;
        snprintf(hdr.backend, sizeof hdr.backend, "%s", p->be->name);
      }
    }
    if (b)
      spin_unlock(&sh->lock);
    pthread_mutex_unlock(&p->slow_lock);
  }
  /* Listed before sending, so that a second export of the block or on the
   * socket is refused meanwhile; sent without g_lock, which every other
   * export, import, wait and gpupool_destroy takes: sending waits for the
   * importer to receive (a full socket), perhaps an importer on another
   * thread of this process, in gpupool_share_import. */
  if (st == GPUPOOL_OK) {
    *ex = (gpupool_export){.p = p,
                           .b = b,
                           .sock = sock,
                           .seqpacket = seqpacket,
                           .sid = sid,
                           .id = hdr.id,
                           .sending = 1,
                           .next = g_exports};
    g_exports = ex;
  }
  pthread_mutex_unlock(&g_lock);
  if (st == GPUPOOL_OK)
    st = send_pages(p->be, &hdr, h, n, sock);
  free(h);
  pthread_mutex_lock(&g_lock);
  if (st == GPUPOOL_OK) {
    ex->sending = 0;
    *out = ex;
  } else {
    if (ex->sending) { /* listed: the checks passed and the block was taken */
      if (ex->b)       /* NULL: its pool was destroyed meanwhile */
        return_block(ex);
      unlist_export(ex);
    }
    free(ex);
  }
  pthread_mutex_unlock(&g_lock);
  return st;
}

int share_claims(gpupool *p, void *ptr, int freeing, void *stream, gpupool_status *st) {
  const char *call = freeing ? "gpupool_free" : "gpupool_record_stream";
  pthread_mutex_lock(&g_lock);
  gpupool_export *ex = find_export(p, (uintptr_t)ptr);
  if (!ex) {
    /* end_export may have put it back after the caller looked: then the
     * call goes again (and finds it live, unless freed meanwhile). */
    pthread_mutex_unlock(&g_lock);
    shard *sh;
    if (!find_live(p, (uintptr_t)ptr, &sh))
      return 0;
    spin_unlock(&sh->lock);
    *st = freeing ? gpupool_free(p, ptr) : gpupool_record_stream(p, ptr, stream);
    return 1;
  }
  if (freeing) {
    if (ex->freed)
      *st = pool_fail(GPUPOOL_ERR_INVALID,
                      "%s: pool '%s': %p was freed already (a double free); it is exported, and "
                      "returns to the pool when its importer releases it",
                      call, p->cfg.name, ptr);
    else { /* counted as a free now; the block returns when the export ends */
      shard *sh = ex->b->seg->sh;
      spin_lock(&sh->lock);
      shard_free_held(sh, ex->b);
      spin_unlock(&sh->lock);
      ex->freed = 1;
      *st = GPUPOOL_OK;
    }
  } else {
    *st = pool_fail(GPUPOOL_ERR_INVALID,
                    "%s: pool '%s': %p is exported to another process: record its streams "
                    "before exporting it",
                    call, p->cfg.name, ptr);
  }
  pthread_mutex_unlock(&g_lock);
  return 1;
}

void share_pool_destroyed(gpupool *p) {
  pthread_mutex_lock(&g_lock);
  for (gpupool_export *e = g_exports; e; e = e->next)
    if (e->p == p) {
      e->p = NULL;
      e->b = NULL;
    }
  pthread_mutex_unlock(&g_lock);
}

/* The importer is done: the block goes back (return_block); an orphaned
 * export (its pool destroyed) just ends. */
static void end_export(gpupool_export *ex, int *ended) {
  pthread_mutex_lock(&g_lock);
  if (ex->b)
    return_block(ex);
  unlist_export(ex);
  pthread_mutex_unlock(&g_lock);
  free(ex);
  *ended = 1;
}

gpupool_status gpupool_share_wait(gpupool_export *ex, int timeout_ms, int *ended) {
  const char *call = "gpupool_share_wait";
  if (ended)
    *ended = 0;
  if (!ex || !ended)
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: %s is NULL", call, ex ? "ended" : "export");
  if (timeout_ms < -1)
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: timeout_ms %d: expected 0 or more milliseconds, or -1 (no limit)", call,
                     timeout_ms);
  pthread_mutex_lock(&g_lock);
  int orphaned = !ex->b;
  pthread_mutex_unlock(&g_lock);
  if (orphaned) {
    end_export(ex, ended);
    return GPUPOOL_OK;
  }
  if (!still_socket(ex->sock, ex->sid))
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: socket %d is closed%s (the exporter must keep it open until the export "
                     "ends)",
                     call, ex->sock,
                     fcntl(ex->sock, F_GETFD) < 0 ? "" : " and its number was reused");
  /* A message that comes in parts (a stream socket) is kept in ex->rx when
   * the time is up: the next call goes on with it. */
  gpupool_status st = GPUPOOL_OK;
  int got = recv_msg(call, ex->sock, ex->seqpacket, &ex->rx, NULL, 0, NULL,
                     deadline_after(timeout_ms), &st);
  if (got == 2)
    return GPUPOOL_OK;
  if (got < 0)
    return st;
  const share_msg *m = &ex->rx.m;
  if (got > 0 && (m->version != SHARE_VERSION || m->kind != MSG_RELEASE || m->id != ex->id))
    return pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: socket %d: a message that is not the release of this export (the "
                     "export goes on)",
                     call, ex->sock);
  end_export(ex, ended); /* released, the socket closed, or the importer gone */
  return GPUPOOL_OK;
}

/* ---- importing ---- */

static gpupool_status import_backend(const share_msg *m, int device, backend **out) {
  const char *call = "gpupool_share_import";
  gpupool_status st;
  if (strcmp(m->backend, "host") == 0) {
    host_backend_config hc = {.capacity = SIZE_MAX / 2}; /* imported pages are not charged */
    st = backend_host_create(&hc, out);
  } else if (strcmp(m->backend, "cuda") == 0) {
    st = backend_cuda_create(device, out);
    if (st != GPUPOOL_OK)
      return pool_fail(st == GPUPOOL_ERR_INVALID ? st : GPUPOOL_ERR_UNSUPPORTED,
                       "%s: the export comes from a cuda pool, and backend cuda is not available "
                       "on device %d here: %s",
                       call, device, gpupool_last_error());
  } else {
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: the export names an unknown backend", call);
  }
  if (st != GPUPOOL_OK)
    return backend_failed(call, st);
  const backend_vmm_ops *vmm = (*out)->ops->vmm;
  const char *why = !vmm || !vmm->map_shared            ? "has no virtual memory management here"
                    : (*out)->page_size != m->page_size ? "has pages of another size here"
                                                        : NULL;
  if (why) {
    size_t page = (*out)->page_size;
    (*out)->ops->destroy(*out);
    *out = NULL;
    return pool_fail(GPUPOOL_ERR_UNSUPPORTED,
                     "%s: backend %s on device %d %s (%zu-byte pages, the export's are %llu)", call,
                     m->backend, device, why, page, (unsigned long long)m->page_size);
  }
  return GPUPOOL_OK;
}

/* Whether m is the first message of an export: a header that adds up (the
 * block within its pages, written so that no sum can wrap). The descriptors
 * it came with are checked apart: m->nfds says how many it should have
 * brought. */
static int valid_header(const share_msg *m) {
  uint64_t ps = m->page_size;
  return m->version == SHARE_VERSION && m->kind == MSG_EXPORT && m->first == 0 &&
         memchr(m->backend, '\0', sizeof m->backend) && m->npages >= 1 &&
         m->npages <= SHARE_MAX_PAGES && ps && !(ps & (ps - 1)) && ps <= ((uint64_t)1 << 32) &&
         m->offset < ps && m->size >= 1 && m->size <= (uint64_t)m->npages * ps - m->offset &&
         m->nfds == (m->npages < SHARE_FDS ? m->npages : SHARE_FDS);
}

/* Whether m is the next page message of export id: pages from `have` on,
 * nfds of them, as many as the export has left up to SHARE_FDS. */
static int valid_pages(const share_msg *m, size_t nfds, uint64_t id, uint32_t have, uint32_t n) {
  return m->version == SHARE_VERSION && m->kind == MSG_PAGES && m->id == id && m->first == have &&
         m->nfds == nfds && nfds == (n - have < SHARE_FDS ? n - have : SHARE_FDS);
}

/* Maps the pages of the export whose first message is in rx (its nfds
 * descriptors in fds) at base on be, message by message, each descriptor
 * closed once mapped: no more than SHARE_FDS are open at once. With st
 * failed already (be NULL, when there is no backend) it maps nothing and
 * only receives, so that the socket is left after the export. *mapped
 * counts the pages mapped; *aborted says the exporter gave up. Returns the
 * first failure, with its words in gpupool_last_error(). */
static gpupool_status import_pages(int sock, int seqpacket, share_rx *rx, int *fds, size_t nfds,
                                   backend *be, void *base, gpupool_status st, size_t *mapped,
                                   int *aborted) {
  const char *call = "gpupool_share_import";
  char why[POOL_ERROR_MAX] = "";
  if (st != GPUPOOL_OK)
    snprintf(why, sizeof why, "%s", gpupool_last_error());
  const share_msg *m = &rx->m;
  uint64_t id = m->id;
  uint32_t n = m->npages;
  for (uint32_t have = 0;;) {
    for (size_t i = 0; i < nfds && st == GPUPOOL_OK; i++) {
      st = be->ops->vmm->map_shared(be, (char *)base + (have + i) * be->page_size, fds[i],
                                    m->page_offset[i]);
      if (st == GPUPOOL_OK)
        (*mapped)++;
      else {
        backend_failed(call, st);
        snprintf(why, sizeof why, "%s", gpupool_last_error());
      }
    }
    close_fds(fds, nfds);
    have += (uint32_t)nfds;
    if (have == n)
      break;
    gpupool_status lost = GPUPOOL_OK; /* out of step with the export: stop */
    int got = recv_msg(call, sock, seqpacket, rx, fds, SHARE_FDS, &nfds,
                       socket_deadline(sock, SO_RCVTIMEO), &lost);
    if (got == 2)
      lost = timed_out(call, sock, "waiting for the export's next pages", SO_RCVTIMEO);
    else if (got == 0)
      lost =
          pool_fail(GPUPOOL_ERR_INVALID, "%s: socket %d closed after %u of the export's %u pages",
                    call, sock, have, n);
    else if (got > 0 && m->version == SHARE_VERSION && m->kind == MSG_ABORT && m->id == id) {
      close_fds(fds, nfds);
      *aborted = 1;
      lost = pool_fail(GPUPOOL_ERR_BACKEND,
                       "%s: socket %d: the exporter failed after sending %u of the export's %u "
                       "pages (its gpupool_last_error() says why)",
                       call, sock, have, n);
    } else if (got > 0 && !valid_pages(m, nfds, id, have, n)) {
      close_fds(fds, nfds);
      lost = pool_fail(GPUPOOL_ERR_INVALID, "%s: socket %d: a bad page message", call, sock);
    }
    if (got != 1 || lost != GPUPOOL_OK) {
      if (st == GPUPOOL_OK)
        return lost;
      break;
    }
  }
  if (st != GPUPOOL_OK)
    pool_fail(st, "%s", why); /* the first failure's words, not a later one's */
  return st;
}

static void unlist_import(gpupool_import *im) {
  pthread_mutex_lock(&g_lock);
  for (gpupool_import **l = &g_imports; *l; l = &(*l)->next)
    if (*l == im) {
      *l = im->next;
      break;
    }
  pthread_mutex_unlock(&g_lock);
}

gpupool_status gpupool_share_import(int sock, int device, void **ptr, size_t *size,
                                    gpupool_import **out) {
  const char *call = "gpupool_share_import";
  pthread_once(&atfork_once, register_atfork);
  if (!ptr || !size || !out)
    return pool_fail(GPUPOOL_ERR_INVALID, "%s: %s is NULL", call,
                     !ptr    ? "ptr"
                     : !size ? "size"
                             : "out");
  *out = NULL;
  int seqpacket;
  sock_id sid;
  gpupool_status st = check_socket(call, sock, &seqpacket, &sid);
  if (st != GPUPOOL_OK)
    return st;
  gpupool_import *im = calloc(1, sizeof *im);
  if (!im)
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "%s: out of host memory", call);
  /* Listed before receiving, so that a second import on this socket is
   * refused even while the first one waits for its message. */
  pthread_mutex_lock(&g_lock);
  for (gpupool_import *e = g_imports; e; e = e->next)
    if (same_socket(e->sid, sid))
      st = pool_fail(GPUPOOL_ERR_INVALID,
                     "%s: socket %d carries an imported block already (one import per export: "
                     "release it first)",
                     call, sock);
  if (st == GPUPOOL_OK) {
    im->sock = sock;
    im->sid = sid;
    im->next = g_imports;
    g_imports = im;
  }
  pthread_mutex_unlock(&g_lock);
  if (st != GPUPOOL_OK) {
    free(im);
    return st;
  }

  share_rx rx = {.got = 0};
  int first_fds[SHARE_FDS];
  size_t nfds = 0;
  int got = recv_msg(call, sock, seqpacket, &rx, first_fds, SHARE_FDS, &nfds,
                     socket_deadline(sock, SO_RCVTIMEO), &st);
  const share_msg m = rx.m; /* the header: rx takes the next messages */
  if (got == 0)
    st =
        pool_fail(GPUPOOL_ERR_INVALID, "%s: socket %d was closed: no export to import", call, sock);
  else if (got == 3 && m.version == SHARE_VERSION && m.kind == MSG_EXPORT)
    send_release(sock, m.id); /* its pages cannot come: the export ends */
  else if (got == 2)
    st = timed_out(call, sock, "waiting for an export", SO_RCVTIMEO);
  else if (got > 0 && !valid_header(&m)) {
    close_fds(first_fds, nfds);
    st = pool_fail(GPUPOOL_ERR_INVALID,
                   "%s: socket %d: a message that is not the start of an export", call, sock);
  } else if (got > 0 && nfds != m.nfds) {
    close_fds(first_fds, nfds);
    send_release(sock, m.id); /* its pages cannot be taken: the export ends */
    st = pool_fail(GPUPOOL_ERR_INVALID,
                   "%s: socket %d: an export's first message came with %zu file descriptors "
                   "where it names %u",
                   call, sock, nfds, (unsigned)m.nfds);
  }
  if (st != GPUPOOL_OK) {
    unlist_import(im);
    free(im);
    return st;
  }
  /* From here on the exporter hears of any failure (a release), so that its
   * export ends, unless it gave up itself. */
  uint64_t id = m.id;
  size_t npages = m.npages, bytes = m.size, offset = m.offset;
  backend *be = NULL;
  void *base = NULL;
  st = import_backend(&m, device, &be);
  if (st == GPUPOOL_OK) {
    void *range = NULL;
    st = be->ops->vmm->reserve(be, npages * be->page_size, &range);
    if (st == GPUPOOL_OK)
      base = range;
    else
      backend_failed(call, st);
  }
  size_t mapped = 0;
  int aborted = 0;
  st = import_pages(sock, seqpacket, &rx, first_fds, nfds, be, base, st, &mapped, &aborted);
  if (st != GPUPOOL_OK) {
    if (mapped)
      be->ops->vmm->unmap(be, base, mapped);
    if (base)
      be->ops->vmm->unreserve(be, base, npages * be->page_size);
    if (be)
      be->ops->destroy(be);
    if (!aborted)
      send_release(sock, id);
    unlist_import(im);
    free(im);
    return st;
  }
  im->be = be;
  im->base = base;
  im->npages = npages;
  im->id = id;
  *ptr = (char *)base + offset;
  *size = bytes;
  *out = im;
  return GPUPOOL_OK;
}

gpupool_status gpupool_share_release(gpupool_import *im) {
  if (!im)
    return pool_fail(GPUPOOL_ERR_INVALID, "gpupool_share_release: import is NULL");
  backend *be = im->be;
  be->ops->vmm->unmap(be, im->base, im->npages);
  be->ops->vmm->unreserve(be, im->base, im->npages * be->page_size);
  be->ops->destroy(be);
  if (still_socket(im->sock, im->sid)) /* never into another socket that took its number */
    send_release(im->sock, im->id);
  unlist_import(im);
  free(im);
  return GPUPOOL_OK;
}
