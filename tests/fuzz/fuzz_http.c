/* libFuzzer target: HTTP requests to a running agent (host backend, three
 * pools with live and free blocks, one OOM report). An input's bytes up to
 * the first newline are the request target, sent as they are ("GET <target>
 * HTTP/1.1"); each further line is a header line. The request ends with
 * "Connection: close", and the response is read to its end. Errors in the
 * agent's threads (ASan, UBSan) end the run like the harness's own.
 * Built with FUZZ_HTTP_BASIC_AUTH (fuzz_http_auth), the agent requires basic
 * auth (user "fuzz", password "pw"), so every request goes through the
 * Authorization header's parsing, the credentials cache and the bcrypt
 * rate limit first. */
#include <arpa/inet.h>
#include <errno.h>
#include <gpupool/agent.h>
#include <gpupool/gpupool.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_file.h"

#define MAX_INPUT 4096

static int agent_port;
static gpupool *pools[3];

#ifdef FUZZ_HTTP_BASIC_AUTH
/* The web configuration, in a memfd named by its /proc/self/fd path (the
 * agent reads it at start and watches it for changes). bcrypt cost 4: the
 * lowest, for speed. */
static const char *basic_auth_config(void) {
  static const char yml[] =
      "basic_auth_users:\n  fuzz: $2b$04$X.xtKwj0WjXP/Nx5UDXFvum3ea1uVNKlYmicqxBCcUESNkemQR8My\n";
  static char path[64];
  (void)fuzz_file("fuzz_http_web_config", yml, sizeof yml - 1, path, sizeof path); /* kept open */
  return path;
}
#endif

static void start_agent(void) {
  gpupool_agent_options ao = {.listen = "127.0.0.1:0", .ignore_env = 1};
#ifdef FUZZ_HTTP_BASIC_AUTH
  ao.web_config = basic_auth_config();
#endif
  if (gpupool_agent_start(&ao) != GPUPOOL_OK) {
    fprintf(stderr, "fuzz_http: %s\n", gpupool_last_error());
    abort();
  }
  const char *names[3] = {"bfc", "expandable", "bfc"}; /* two "bfc": labels bfc and bfc#2 */
  const char *tunables[3] = {"", "expandable_segments:True", ""};
  for (int i = 0; i < 3; i++) {
    gpupool_options o = {.name = names[i],
                         .backend = GPUPOOL_BACKEND_HOST,
                         .tunables = tunables[i],
                         .host_capacity = (size_t)1 << 30,
                         .ignore_env = 1};
    if (gpupool_create(&o, &pools[i]) != GPUPOOL_OK) {
      fprintf(stderr, "fuzz_http: %s\n", gpupool_last_error());
      abort();
    }
    void *p[20];
    for (int k = 0; k < 20; k++)
      if (gpupool_malloc(pools[i], &p[k], (size_t)(k + 1) << (10 + k % 10), NULL) != GPUPOOL_OK)
        abort();
    for (int k = 0; k < 20; k += 2)
      (void)gpupool_free(pools[i], p[k]);
  }
  void *too_big; /* an OOM, for /oom and /oom/1 */
  if (gpupool_malloc(pools[0], &too_big, (size_t)2 << 30, NULL) != GPUPOOL_ERR_OOM)
    abort();
  agent_port = gpupool_agent_port();
}

/* A connection to the agent. libFuzzer's timeout check is a SIGALRM each
 * second, which interrupts a connect (EINTR): then again, on a new socket. */
static int connect_agent(void) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)agent_port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int tries = 0; tries < 100; tries++) {
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0)
      break;
    if (connect(s, (struct sockaddr *)&a, sizeof a) == 0)
      return s;
    int e = errno;
    close(s);
    if (e != EINTR)
      break;
  }
  perror("fuzz_http: connect to the agent");
  abort(); /* the agent stopped listening */
}

static void send_all(int s, const char *buf, size_t n) {
  while (n > 0) {
    ssize_t w = send(s, buf, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return; /* the agent closed early: an answer to a bad request */
    buf += w;
    n -= (size_t)w;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!agent_port)
    start_agent();
  if (size > MAX_INPUT)
    return 0;
  /* each byte at most twice (\n -> \r\n), and the fixed text */
  char req[2 * MAX_INPUT + 128];
  const uint8_t *nl = memchr(data, '\n', size);
  size_t target = nl ? (size_t)(nl - data) : size, k = 0;
  k += (size_t)snprintf(req, sizeof req, "GET ");
  memcpy(req + k, data, target);
  k += target;
  k += (size_t)snprintf(req + k, sizeof req - k, " HTTP/1.1\r\nHost: fuzz\r\n");
  /* Empty lines are dropped: one would end the headers before "Connection:
   * close", and the agent would keep the connection open until its idle
   * timeout. */
  int line_start = 1;
  for (size_t i = target + 1; nl && i < size; i++) {
    if (data[i] == '\n') {
      if (!line_start)
        k += (size_t)snprintf(req + k, sizeof req - k, "\r\n");
      line_start = 1;
    } else {
      req[k++] = (char)data[i];
      line_start = 0;
    }
  }
  if (!line_start)
    k += (size_t)snprintf(req + k, sizeof req - k, "\r\n");
  k += (size_t)snprintf(req + k, sizeof req - k, "Connection: close\r\n\r\n");
  int s = connect_agent();
  send_all(s, req, k);
  char buf[65536];
  ssize_t got;
  while ((got = recv(s, buf, sizeof buf, 0)) > 0 || (got < 0 && errno == EINTR)) {
  }
  close(s);
  return 0;
}
