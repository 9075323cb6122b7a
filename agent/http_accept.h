/* Content negotiation of the agent's HTTP server: the quality an Accept or
 * Accept-Encoding header gives to a media type or a coding. */
#ifndef GPUPOOL_HTTP_ACCEPT_H
#define GPUPOOL_HTTP_ACCEPT_H

#include <stddef.h>

/* q (0..1) that header gives to type/subtype, through an exact range, a
 * type-wide wildcard or the any-type wildcard (the most specific wins); 1 when
 * header is NULL or empty and wildcard_ok is set, else 0. */
double http_accept_q(const char *header, const char *type, int wildcard_ok);
/* http_accept_q without wildcards, for a type whose elements may carry a
 * version parameter: an element naming a version not in `versions` (a
 * NULL-terminated list) does not match, as client_golang negotiates
 * OpenMetrics. The chosen element's version goes into version ("" when it
 * names none). */
double http_accept_q_version(const char *header, const char *type, const char *const *versions,
                             char *version, size_t version_len);
/* 1 when an Accept-Encoding header allows gzip (q > 0, directly or by "*"). */
int http_accepts_gzip(const char *accept_encoding);

#endif
