/* A tiny HTTP/1.1 client for tests: one request per connection
 * ("Connection: close"), the whole answer read into memory, chunked bodies
 * decoded. Every socket operation times out (10 s), so a test never hangs on
 * a server that does not answer. */
#ifndef TEST_HTTP_CLIENT_H
#define TEST_HTTP_CLIENT_H

#include <stddef.h>

typedef struct http_response {
  int status;    /* 200, 404, ... */
  char *headers; /* the raw header lines after the status line, NUL-terminated */
  char *body;    /* the (de-chunked) body, NUL-terminated */
  size_t body_len;
} http_response;

/* Sends `method target` to host:port (host may be a name, an IPv4 or an
 * IPv6 address without brackets). extra_headers: NULL or lines each ending
 * in "\r\n". 0 on a complete answer, -1 otherwise (out is then empty). */
int http_request(const char *host, int port, const char *method, const char *target,
                 const char *extra_headers, http_response *out);
/* The value of header name (case-insensitive) copied into buf, or NULL. */
const char *http_header(const http_response *r, const char *name, char *buf, size_t buflen);
void http_response_free(http_response *r);

/* A connected TCP socket with the same timeouts, or -1. */
int http_connect(const char *host, int port);
/* Reads from fd until the peer closes, into a malloc'd, NUL-terminated
 * buffer: 0, or -1 on a timeout or error. */
int http_read_all(int fd, char **out, size_t *len);

/* gunzip of a whole gzip stream into a malloc'd, NUL-terminated buffer; 0 or
 * -1 (also when the build has no zlib). */
int http_gunzip(const char *in, size_t len, char **out, size_t *outlen);

#endif
