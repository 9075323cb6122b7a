#include "http_client.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#ifdef GPUPOOL_HAVE_ZLIB
#include <zlib.h>
#endif

#define TIMEOUT_S    10
#define MAX_RESPONSE (256u << 20)

int http_connect(const char *host, int port) {
  char service[8];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo *res;
  if (getaddrinfo(host, service, &hints, &res) != 0)
    return -1;
  int fd = -1;
  for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
      continue;
    struct timeval tv = {.tv_sec = TIMEOUT_S};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(res);
  return fd;
}

static int send_all(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t k = send(fd, s, n, MSG_NOSIGNAL);
    if (k <= 0)
      return -1;
    s += k;
    n -= (size_t)k;
  }
  return 0;
}

int http_read_all(int fd, char **out, size_t *len) {
  size_t cap = 65536, n = 0;
  char *buf = malloc(cap);
  if (!buf)
    return -1;
  for (;;) {
    if (cap - n < 65536) {
      if (cap >= MAX_RESPONSE)
        break;
      char *b = realloc(buf, cap * 2);
      if (!b)
        break;
      buf = b;
      cap *= 2;
    }
    ssize_t k = recv(fd, buf + n, cap - n - 1, 0);
    if (k == 0) {
      buf[n] = '\0';
      *out = buf;
      *len = n;
      return 0;
    }
    if (k < 0)
      break;
    n += (size_t)k;
  }
  free(buf);
  return -1;
}

/* Decodes a chunked body in place; its new length, or -1 when malformed. */
static long dechunk(char *body, size_t len) {
  size_t in = 0, out = 0;
  for (;;) {
    char *end;
    unsigned long size = strtoul(body + in, &end, 16);
    char *crlf = strstr(end, "\r\n");
    if (end == body + in || !crlf)
      return -1;
    in = (size_t)(crlf + 2 - body);
    if (size == 0)
      return (long)out;
    if (in + size + 2 > len)
      return -1;
    memmove(body + out, body + in, size);
    out += size;
    in += size + 2;
  }
}

const char *http_header(const http_response *r, const char *name, char *buf, size_t buflen) {
  size_t nlen = strlen(name);
  for (const char *line = r->headers; line && *line;) {
    const char *eol = strstr(line, "\r\n");
    if (!eol)
      eol = line + strlen(line);
    if ((size_t)(eol - line) > nlen && strncasecmp(line, name, nlen) == 0 && line[nlen] == ':') {
      const char *v = line + nlen + 1;
      while (*v == ' ')
        v++;
      snprintf(buf, buflen, "%.*s", (int)(eol - v), v);
      return buf;
    }
    line = *eol ? eol + 2 : eol;
  }
  return NULL;
}

int http_request(const char *host, int port, const char *method, const char *target,
                 const char *extra_headers, http_response *out) {
  memset(out, 0, sizeof *out);
  int fd = http_connect(host, port);
  if (fd < 0)
    return -1;
  char head[4096];
  const char *v6 = strchr(host, ':') ? "[" : ""; /* an IPv6 literal goes in brackets */
  int n = snprintf(head, sizeof head,
                   "%s %s HTTP/1.1\r\nHost: %s%s%s:%d\r\nConnection: close\r\n%s\r\n", method,
                   target, v6, host, *v6 ? "]" : "", port, extra_headers ? extra_headers : "");
  char *raw = NULL;
  size_t len = 0;
  int rc = (n > 0 && (size_t)n < sizeof head && send_all(fd, head, (size_t)n) == 0)
               ? http_read_all(fd, &raw, &len)
               : -1;
  close(fd);
  if (rc != 0)
    return -1;

  char *hdr_end = strstr(raw, "\r\n\r\n");
  if (strncmp(raw, "HTTP/1.", 7) != 0 || !hdr_end) {
    free(raw);
    return -1;
  }
  out->status = atoi(raw + 9);
  char *first_eol = strstr(raw, "\r\n");
  size_t hlen = (size_t)(hdr_end + 2 - (first_eol + 2));
  out->headers = malloc(hlen + 1);
  size_t blen = len - (size_t)(hdr_end + 4 - raw);
  out->body = malloc(blen + 1);
  if (!out->headers || !out->body) {
    free(raw);
    http_response_free(out);
    return -1;
  }
  memcpy(out->headers, first_eol + 2, hlen);
  out->headers[hlen] = '\0';
  memcpy(out->body, hdr_end + 4, blen);
  out->body[blen] = '\0';
  out->body_len = blen;
  free(raw);

  char te[64];
  if (strcmp(method, "HEAD") != 0 && http_header(out, "Transfer-Encoding", te, sizeof te) &&
      strcasecmp(te, "chunked") == 0) {
    long dl = dechunk(out->body, out->body_len);
    if (dl < 0) {
      http_response_free(out);
      return -1;
    }
    out->body_len = (size_t)dl;
    out->body[dl] = '\0';
  }
  return 0;
}

void http_response_free(http_response *r) {
  free(r->headers);
  free(r->body);
  memset(r, 0, sizeof *r);
}

int http_gunzip(const char *in, size_t len, char **out, size_t *outlen) {
#ifdef GPUPOOL_HAVE_ZLIB
  z_stream z = {0};
  if (inflateInit2(&z, 15 + 16) != Z_OK)
    return -1;
  size_t cap = len * 4 + 1024, n = 0;
  char *buf = malloc(cap);
  z.next_in = (Bytef *)in;
  z.avail_in = (uInt)len;
  int rc = Z_OK;
  while (buf && rc == Z_OK) {
    if (cap - n < 1024) {
      char *b = realloc(buf, cap * 2);
      if (!b)
        break;
      buf = b;
      cap *= 2;
    }
    z.next_out = (Bytef *)buf + n;
    z.avail_out = (uInt)(cap - n - 1);
    rc = inflate(&z, Z_NO_FLUSH);
    n = z.total_out;
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) {
    free(buf);
    return -1;
  }
  buf[n] = '\0';
  *out = buf;
  *outlen = n;
  return 0;
#else
  (void)in, (void)len, (void)out, (void)outlen;
  return -1;
#endif
}
