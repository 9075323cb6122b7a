/* Basic auth against the bcrypt hashes of a web configuration, bounded in
 * cost: bcrypt runs on one request at a time and at most
 * WEB_AUTH_BCRYPT_PER_S times a second (a burst of WEB_AUTH_BCRYPT_BURST);
 * a request past either bound is answered "busy" (429) at once, so HTTP
 * threads never queue behind bcrypt and a flood of new passwords costs at
 * most that many hashes a second. Verified
 * credentials are remembered in a small cache keyed by SHA-256 of user,
 * password and hash (a reload that keeps a user's hash keeps the entry), and
 * failures in a separate cache that a flood can churn without evicting the
 * scraper's entry. Comparisons take constant time. */
#ifndef GPUPOOL_WEB_AUTH_H
#define GPUPOOL_WEB_AUTH_H

#include "web_config.h"

#define WEB_AUTH_BCRYPT_PER_S 4
#define WEB_AUTH_BCRYPT_BURST 4
#define WEB_AUTH_OK_CACHE     32
#define WEB_AUTH_FAIL_CACHE   256

typedef enum {
  WEB_AUTH_OK,
  WEB_AUTH_DENIED, /* no, or wrong, credentials: 401 */
  WEB_AUTH_BUSY,   /* not cached, and bcrypt is busy or over its rate: 429 */
} web_auth_result;

/* The credentials of an Authorization header value (NULL: none): the Basic
 * scheme in any case (RFC 9110 11.1, as Go's net/http), then base64 of
 * "user:password" (RFC 7617). 0 and *user, *pass (free both with
 * web_auth_free_credentials), or -1 where it holds none: another scheme,
 * bad base64, no colon, or a NUL byte (which no C string can compare). */
int web_auth_parse_basic(const char *authorization, char **user, char **pass);
void web_auth_free_credentials(char *user, char *pass);

/* user/pass as the request gave them (NULL when it sent no credentials);
 * now_s: a monotonic clock in seconds. */
web_auth_result web_auth_check(const web_config *c, const char *user, const char *pass,
                               double now_s);
/* Forgets every cached result (agent start and stop). */
void web_auth_reset(void);
/* 1 when a request may go on under c's rate_limit (token bucket), else 0
 * and *wait_s the seconds until the bucket holds a token again. */
int web_rate_allow(const web_config *c, double now_s, double *wait_s);

#endif
