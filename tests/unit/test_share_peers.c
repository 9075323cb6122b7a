/* Sharing (gpupool/share.h) with a peer that does not follow the protocol:
 * messages forged here (pool/share_msg.h), peers that send part of a
 * message and go quiet, sockets with receive or send timeouts, descriptor
 * numbers reused. Every such case must end in a clear error or a bounded
 * wait, never a hang, a wrong answer or a leaked descriptor. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpupool/share.h"
#include "helpers/pool_check.h"
#include "helpers/share_check.h"
#include "pool/share_msg.h"

#define MiB PC_MiB

static double seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void set_timeout(int sock, int opt, int ms) {
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  cr_assert_eq(setsockopt(sock, SOL_SOCKET, opt, &tv, sizeof tv), 0, "%s", strerror(errno));
}

static int open_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  cr_assert_not_null(d);
  int n = 0;
  for (struct dirent *e; (e = readdir(d));)
    n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

/* Sends m with descriptors fds[0..n) attached, as an exporter would. */
static void send_forged(int sock, const share_msg *m, const int *fds, size_t n) {
  union {
    char buf[CMSG_SPACE(SHARE_FDS * sizeof(int))];
    struct cmsghdr align;
  } ctl;
  struct iovec iov = {(void *)m, sizeof *m};
  struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
  if (n) {
    memset(&ctl, 0, sizeof ctl);
    mh.msg_control = ctl.buf;
    mh.msg_controllen = CMSG_SPACE(n * sizeof(int));
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
  }
  cr_assert_eq(sendmsg(sock, &mh, MSG_NOSIGNAL), (ssize_t)sizeof *m, "sendmsg: %s",
               strerror(errno));
}

/* The first message of a one-page host export of a 2 MiB memfd. */
static share_msg forged_header(void) {
  share_msg m = {.magic = SHARE_MAGIC,
                 .version = SHARE_VERSION,
                 .kind = MSG_EXPORT,
                 .id = 7,
                 .size = MiB,
                 .page_size = 2 * MiB,
                 .npages = 1,
                 .nfds = 1};
  snprintf(m.backend, sizeof m.backend, "host");
  return m;
}

static int page_file(void) {
  int fd = memfd_create("share-peers", MFD_CLOEXEC);
  cr_assert_geq(fd, 0, "memfd_create: %s", strerror(errno));
  cr_assert_eq(ftruncate(fd, 2 * (off_t)MiB), 0);
  return fd;
}

/* A header whose block, at its offset, would run past its pages only by an
 * unsigned sum that wraps: refused, not a block of 2^64 - 1 bytes. */
Test(share_peers, a_size_that_wraps_past_the_pages_is_refused) {
  int sv[2];
  share_sockets(sv);
  int page = page_file();
  share_msg m = forged_header();
  m.offset = 1;
  m.size = UINT64_MAX;
  send_forged(sv[0], &m, &page, 1);
  int before = open_fds();
  void *y = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
                    "not the start of an export");
  cr_assert_null(im);
  cr_assert_eq(open_fds(), before, "the refused message's descriptor leaked");

  /* The same header with a size that fits is an export. */
  m.size = 2 * MiB - 1;
  send_forged(sv[0], &m, &page, 1);
  cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  cr_assert_eq(size, 2 * MiB - 1);
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  close(page);
  close(sv[0]);
  close(sv[1]);
}

/* The importer's release comes in two parts, far apart: a wait with a
 * timeout returns when the time is up (the export goes on), and the next
 * wait goes on from the part received. The wait used to block in the
 * middle of the message, past its timeout, until the rest came. */
Test(share_peers, a_wait_returns_on_time_from_a_release_cut_in_two, .timeout = 30) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  int sv[2];
  share_sockets(sv);
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  share_msg m;
  cr_assert_eq(recv(sv[1], &m, sizeof m, MSG_WAITALL), (ssize_t)sizeof m); /* its descriptor goes */
  share_msg release = {
      .magic = SHARE_MAGIC, .version = SHARE_VERSION, .kind = MSG_RELEASE, .id = m.id};
  size_t cut = 3;
  cr_assert_eq(write(sv[1], &release, cut), (ssize_t)cut);
  int ended = 1;
  double t0 = seconds();
  cr_assert_eq(gpupool_share_wait(ex, 200, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 0);
  cr_assert_lt(seconds() - t0, 5.0, "the wait took %.1f s of its 0.2", seconds() - t0);
  cr_assert_eq(gpupool_share_wait(ex, 0, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 0);
  cr_assert_eq(pc_stats(p).allocated_bytes[GPUPOOL_STAT_ALL].current, 4 * (int64_t)MiB);

  cr_assert_eq(write(sv[1], (char *)&release + cut, sizeof release - cut),
               (ssize_t)(sizeof release - cut));
  cr_assert_eq(gpupool_share_wait(ex, 10000, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1, "the release's second part did not end the export");
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

/* SO_RCVTIMEO on the importer's socket bounds each wait of the import, as
 * it bounds a blocking recv: nothing comes, or an export stops after its
 * first message. The import used to wait for ever. */
Test(share_peers, an_import_honours_so_rcvtimeo, .timeout = 30) {
  int sv[2];
  share_sockets(sv);
  set_timeout(sv[1], SO_RCVTIMEO, 200);
  int before = open_fds();
  void *y = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  double t0 = seconds();
  share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_BACKEND,
                    "timed out (its SO_RCVTIMEO)");
  cr_assert_lt(seconds() - t0, 5.0);
  cr_assert_null(im);

  /* 65 pages announced, 64 sent: the export's second message never comes. */
  int page = page_file();
  share_msg m = forged_header();
  m.npages = 65;
  m.size = 65 * 2 * MiB;
  m.nfds = SHARE_FDS;
  int fds[SHARE_FDS];
  for (int i = 0; i < SHARE_FDS; i++)
    fds[i] = page;
  send_forged(sv[0], &m, fds, SHARE_FDS);
  close(page);
  t0 = seconds();
  share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_BACKEND,
                    "timed out (its SO_RCVTIMEO)");
  cr_assert_lt(seconds() - t0, 5.0);
  cr_assert_null(im);
  cr_assert_eq(open_fds(), before, "the import leaked descriptors");
  /* The exporter hears of the failure. */
  share_msg release;
  cr_assert_eq(recv(sv[0], &release, sizeof release, MSG_DONTWAIT), (ssize_t)sizeof release);
  cr_assert_eq(release.kind, MSG_RELEASE);
  cr_assert_eq(release.id, m.id);
  close(sv[0]);
  close(sv[1]);
}

/* SO_SNDTIMEO on the exporter's socket bounds its waits for room: an
 * importer that reads nothing, with a small send buffer. */
Test(share_peers, an_export_honours_so_sndtimeo, .timeout = 30) {
  gpupool *p = share_pool();
  void *x = share_take(p, 600 * MiB); /* 300 pages: 5 messages */
  int sv[2];
  share_sockets(sv);
  int small = 1; /* the smallest buffer the system allows */
  cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  set_timeout(sv[0], SO_SNDTIMEO, 200);
  gpupool_export *ex = NULL;
  double t0 = seconds();
  share_expect_fail(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_ERR_BACKEND,
                    "timed out (its SO_SNDTIMEO)");
  cr_assert_lt(seconds() - t0, 5.0);
  cr_assert_null(ex);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "the block is the caller's still: %s",
               gpupool_last_error());
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}

/* A socket is told by what it is, not by its number: an export left behind
 * (its pool destroyed, its socket closed, never waited for) does not hold
 * the number against the next socket that gets it; a dup(2) of a socket that
 * carries an export is that socket; a wait on a number closed and reused
 * says so rather than reading another socket. */
Test(share_peers, sockets_are_told_apart_by_what_they_are) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  int sv[2];
  share_sockets(sv);
  gpupool_export *left = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &left), GPUPOOL_OK, "%s", gpupool_last_error());
  int number = sv[0];
  gpupool_destroy(p);
  close(sv[0]);
  close(sv[1]);

  p = share_pool();
  x = share_take(p, 4 * MiB);
  share_sockets(sv);
  if (sv[0] != number) { /* make the new socket take the old number */
    cr_assert_eq(dup2(sv[0], number), number);
    close(sv[0]);
    sv[0] = number;
  }
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK,
               "a new socket under an old number: %s", gpupool_last_error());
  int ended = 0;
  cr_assert_eq(gpupool_share_wait(left, 0, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1, "an orphaned export ends at once");

  /* A dup of the socket carries the same export. */
  int twin = dup(sv[0]);
  void *w = share_take(p, 4 * MiB);
  gpupool_export *ex2 = NULL;
  share_expect_fail(gpupool_share_export(p, w, twin, &ex2), GPUPOOL_ERR_INVALID,
                    "carries another export");
  cr_assert_null(ex2);

  /* The importer's side: a dup of its socket is the same import. */
  void *y = NULL, *y2 = NULL;
  size_t size = 0;
  gpupool_import *im = NULL, *im2 = NULL;
  cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  int importer_twin = dup(sv[1]);
  share_expect_fail(gpupool_share_import(importer_twin, 0, &y2, &size, &im2), GPUPOOL_ERR_INVALID,
                    "carries an imported block already");
  cr_assert_null(im2);
  close(importer_twin);
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  cr_assert_eq(gpupool_share_wait(ex, 10000, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1);

  /* A live export whose socket was closed, and whose number another socket
   * took: its wait says so, and reads nothing from that other socket. */
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  int other[2];
  share_sockets(other); /* both ends under other numbers than sv[0]'s */
  close(sv[0]);
  cr_assert_eq(dup2(other[1], number), number);
  cr_assert_eq(write(other[0], "x", 1), 1);
  share_expect_fail(gpupool_share_wait(ex, 0, &ended), GPUPOOL_ERR_INVALID, "number was reused");
  cr_assert_eq(ended, 0);
  char byte;
  cr_assert_eq(recv(number, &byte, 1, MSG_DONTWAIT), 1, "the wait read another socket");
  close(number);
  share_expect_fail(gpupool_share_wait(ex, 0, &ended), GPUPOOL_ERR_INVALID, "is closed");
  close(other[0]);
  close(other[1]);
  close(twin);
  close(sv[1]);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK); /* deferred: the export never ends */
  cr_assert_eq(gpupool_free(p, w), GPUPOOL_OK);
  gpupool_destroy(p);
}

/* A release after the importer closed its socket, whose number another
 * socket took meanwhile, writes nothing into that other socket. */
Test(share_peers, a_release_never_writes_into_a_socket_that_took_the_number) {
  gpupool *p = share_pool();
  void *x = share_take(p, 4 * MiB);
  int sv[2];
  share_sockets(sv);
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  void *y = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  int number = sv[1];
  close(sv[1]);
  int other[2];
  share_sockets(other);
  if (other[0] != number) { /* make another socket take the number */
    cr_assert_eq(dup2(other[0], number), number);
    close(other[0]);
  }
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK, "%s", gpupool_last_error());
  char byte;
  ssize_t r = recv(other[1], &byte, 1, MSG_DONTWAIT);
  cr_assert_eq(r, -1, "the release went into a socket that is not the import's (%zd)", r);
  int ended = 0;
  cr_assert_eq(gpupool_share_wait(ex, 10000, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1, "the importer's end closed: the export ends");
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  close(number);
  close(other[1]);
  close(sv[0]);
  gpupool_destroy(p);
}

/* RLIMIT_NOFILE at n descriptors above those open now. */
static void limit_fds(int n) {
  struct rlimit rl;
  cr_assert_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
  rl.rlim_cur = (rlim_t)(open_fds() + n);
  cr_assert_eq(setrlimit(RLIMIT_NOFILE, &rl), 0, "%s", strerror(errno));
}

/* A block of more pages than the process may open descriptors: export and
 * import hold one message's worth (64) at a time, not one per page of the
 * block (then 1024 pages, 2 GiB, under a common default limit of 1024). The
 * importer is a forked child with a limit of its own. */
Test(share_peers, a_block_of_more_pages_than_the_descriptor_limit, .timeout = 60) {
  gpupool *p = share_pool();
  size_t pages = 300, size = pages * 2 * MiB;
  char *x = share_take(p, size);
  for (size_t page = 0; page < pages; page++)
    x[page * 2 * MiB] = (char)(page + 1);
  int sv[2];
  share_sockets(sv);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    close(sv[0]);
    limit_fds(100);
    void *y = NULL;
    size_t got = 0;
    gpupool_import *im = NULL;
    if (gpupool_share_import(sv[1], 0, &y, &got, &im) != GPUPOOL_OK) {
      fprintf(stderr, "child: %s\n", gpupool_last_error());
      _exit(1);
    }
    for (size_t page = 0; page < pages; page++)
      if (((char *)y)[page * 2 * MiB] != (char)(page + 1))
        _exit(2);
    ((char *)y)[size - 1] = 42;
    _exit(got == size && gpupool_share_release(im) == GPUPOOL_OK ? 0 : 3);
  }
  close(sv[1]);
  int before = open_fds();
  limit_fds(100);
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  int ended = 0;
  cr_assert_eq(gpupool_share_wait(ex, 30000, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1);
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the importer failed (status %d)",
            status);
  cr_assert_eq(x[size - 1], 42);
  cr_assert_eq(open_fds(), before);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  close(sv[0]);
  gpupool_destroy(p);
}

/* 65 pages announced and 64 sent, the rest never comes: the exporter gives
 * up (an abort), or dies. The import fails at once, saying which, with no
 * descriptor left open; it answers an abort with nothing (the export failed,
 * there is nothing to end), the death with a release that the closed
 * socket swallows, whose failure must not take the place of the reason. */
Test(share_peers, an_export_cut_short_fails_the_import_with_its_reason, .timeout = 30) {
  int before = open_fds();
  for (int dies = 1; dies >= 0; dies--) {
    int sv[2];
    share_sockets(sv);
    int page = page_file();
    share_msg m = forged_header();
    m.npages = 65;
    m.size = 65 * 2 * MiB;
    m.nfds = SHARE_FDS;
    int fds[SHARE_FDS];
    for (int i = 0; i < SHARE_FDS; i++)
      fds[i] = page;
    send_forged(sv[0], &m, fds, SHARE_FDS);
    close(page);
    if (dies)
      close(sv[0]);
    else {
      share_msg abort = {
          .magic = SHARE_MAGIC, .version = SHARE_VERSION, .kind = MSG_ABORT, .id = m.id};
      send_forged(sv[0], &abort, NULL, 0);
    }
    void *y = NULL;
    size_t size = 0;
    gpupool_import *im = NULL;
    if (dies)
      share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
                        "closed after 64 of the export's 65 pages");
    else
      share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_BACKEND,
                        "the exporter failed after sending 64 of the export's 65 pages");
    cr_assert_null(im);
    if (!dies) {
      char byte;
      cr_assert_eq(recv(sv[0], &byte, 1, MSG_DONTWAIT), -1, "an abort was answered");
      close(sv[0]);
    }
    close(sv[1]);
  }
  cr_assert_eq(open_fds(), before, "the import leaked descriptors");
}

/* An export the importer cannot map (a backend it does not know) is
 * received to its end all the same: the socket is left in step, and the
 * next export on it imports. */
Test(share_peers, a_refused_export_leaves_the_socket_in_step) {
  int sv[2];
  share_sockets(sv);
  int page = page_file();
  share_msg m = forged_header();
  snprintf(m.backend, sizeof m.backend, "nope");
  m.npages = 65;
  m.size = 65 * 2 * MiB;
  m.nfds = SHARE_FDS;
  int fds[SHARE_FDS];
  for (int i = 0; i < SHARE_FDS; i++)
    fds[i] = page;
  send_forged(sv[0], &m, fds, SHARE_FDS);
  share_msg rest = m;
  rest.kind = MSG_PAGES;
  rest.first = SHARE_FDS;
  rest.nfds = 1;
  send_forged(sv[0], &rest, &page, 1);
  share_msg good = forged_header();
  good.id = 8;
  send_forged(sv[0], &good, &page, 1);
  int before = open_fds();
  void *y = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  share_expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
                    "unknown backend");
  cr_assert_eq(open_fds(), before);
  share_msg release;
  cr_assert_eq(recv(sv[0], &release, sizeof release, MSG_DONTWAIT), (ssize_t)sizeof release);
  cr_assert_eq(release.kind, MSG_RELEASE);
  cr_assert_eq(release.id, m.id);
  cr_assert_eq(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_OK, "%s",
               gpupool_last_error());
  cr_assert_eq(size, MiB);
  cr_assert_eq(gpupool_share_release(im), GPUPOOL_OK);
  close(page);
  close(sv[0]);
  close(sv[1]);
}

typedef struct importer {
  int sock;
  gpupool_status st;
  size_t size;
  char error[256];
} importer;

static void *import_later(void *arg) {
  importer *in = arg;
  nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL); /* the export is stuck by then */
  void *y = NULL;
  gpupool_import *im = NULL;
  in->st = gpupool_share_import(in->sock, 0, &y, &in->size, &im);
  snprintf(in->error, sizeof in->error, "%s", gpupool_last_error());
  if (in->st == GPUPOOL_OK)
    gpupool_share_release(im);
  return NULL;
}

/* An export larger than its socket's buffer waits for the importer to
 * receive; the importer may be another thread of the same process. The
 * exporter used to wait holding the lock of every share call, so that the
 * import, which takes it, never began: a deadlock. */
Test(share_peers, an_export_waiting_for_room_lets_an_import_in_this_process_run, .timeout = 30) {
  gpupool *p = share_pool();
  size_t size = 300 * 2 * MiB; /* 5 messages */
  void *x = share_take(p, size);
  int sv[2];
  share_sockets(sv);
  int small = 1; /* the smallest buffer the system allows: the export does not fit */
  cr_assert_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
  importer in = {.sock = sv[1]};
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, import_later, &in), 0);
  gpupool_export *ex = NULL;
  cr_assert_eq(gpupool_share_export(p, x, sv[0], &ex), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(pthread_join(t, NULL), 0);
  cr_assert_eq(in.st, GPUPOOL_OK, "%s", in.error);
  cr_assert_eq(in.size, size);
  int ended = 0;
  cr_assert_eq(gpupool_share_wait(ex, 10000, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  cr_assert_eq(ended, 1);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK);
  close(sv[0]);
  close(sv[1]);
  gpupool_destroy(p);
}
