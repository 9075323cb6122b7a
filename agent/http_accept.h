/* Content negotiation of the agent's HTTP server: the quality an Accept or
 * Accept-Encoding header gives to a media type or a coding. */
#ifndef GPUPOOL_HTTP_ACCEPT_H
#define GPUPOOL_HTTP_ACCEPT_H

/* q (0..1) that header gives to type/subtype, through an exact range, a
 * type-wide wildcard or the any-type wildcard (the most specific wins); 1 when
 * header is NULL or empty and wildcard_ok is set, else 0. */
double http_accept_q(const char *header, const char *type, int wildcard_ok);
/* 1 when an Accept-Encoding header allows gzip (q > 0, directly or by "*"). */
int http_accepts_gzip(const char *accept_encoding);

#endif
