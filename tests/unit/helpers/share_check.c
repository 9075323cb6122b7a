#include "helpers/share_check.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

#include "helpers/pool_check.h"

gpupool *share_pool(void) {
  return pc_pool(GPUPOOL_STRATEGY_BFC, 1024 * PC_MiB,
                 "expandable_segments:True,expandable_slack_percent:0");
}

void *share_take(gpupool *p, size_t size) {
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, size, NULL), GPUPOOL_OK, "%zu bytes: %s", size,
               gpupool_last_error());
  return x;
}

void share_sockets_of(int type, int sv[2]) {
  cr_assert_eq(socketpair(AF_UNIX, type, 0, sv), 0, "socketpair: %s", strerror(errno));
}

void share_sockets(int sv[2]) {
  share_sockets_of(SOCK_STREAM, sv);
}

void share_expect_fail(gpupool_status got, gpupool_status want, const char *text) {
  cr_assert_eq(got, want, "status %s, want %s: %s", gpupool_status_string(got),
               gpupool_status_string(want), gpupool_last_error());
  cr_assert(strstr(gpupool_last_error(), text), "'%s' does not say '%s'", gpupool_last_error(),
            text);
}
