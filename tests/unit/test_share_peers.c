/* Sharing (gpupool/share.h) with a peer that does not follow the protocol:
 * messages forged here (pool/share_msg.h), peers that send part of a
 * message and go quiet, sockets with receive or send timeouts, descriptor
 * numbers reused. Every such case must end in a clear error or a bounded
 * wait, never a hang, a wrong answer or a leaked descriptor. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "gpupool/share.h"
#include "helpers/pool_check.h"
#include "pool/share_msg.h"

#define MiB PC_MiB

static void sockets(int sv[2]) {
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0, "socketpair: %s", strerror(errno));
}

static void expect_fail(gpupool_status got, gpupool_status want, const char *text) {
  cr_assert_eq(got, want, "status %s, want %s: %s", gpupool_status_string(got),
               gpupool_status_string(want), gpupool_last_error());
  cr_assert(strstr(gpupool_last_error(), text), "'%s' does not say '%s'", gpupool_last_error(),
            text);
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
  sockets(sv);
  int page = page_file();
  share_msg m = forged_header();
  m.offset = 1;
  m.size = UINT64_MAX;
  send_forged(sv[0], &m, &page, 1);
  int before = open_fds();
  void *y = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  expect_fail(gpupool_share_import(sv[1], 0, &y, &size, &im), GPUPOOL_ERR_INVALID,
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
