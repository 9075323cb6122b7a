#include "web_auth.h"

#include <crypt.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

typedef struct entry {
  unsigned char key[32];
  uint64_t used; /* 0 = empty; else a clock for least-recently-used eviction */
} entry;

typedef struct cache {
  entry e[WEB_AUTH_FAIL_CACHE];
  size_t n;
} cache;

static pthread_mutex_t g_cache_lock = PTHREAD_MUTEX_INITIALIZER;
static cache g_ok = {.n = WEB_AUTH_OK_CACHE}, g_fail = {.n = WEB_AUTH_FAIL_CACHE};
static uint64_t g_clock;

/* One bcrypt at a time; its scratch space (32 KiB) is shared under the
 * lock, and so is its token bucket. */
static pthread_mutex_t g_bcrypt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct crypt_data g_crypt;
static double g_bcrypt_tokens = WEB_AUTH_BCRYPT_BURST, g_bcrypt_last_s;

static int equal_ct(const void *a, const void *b, size_t n) {
  const volatile unsigned char *x = a, *y = b;
  unsigned char d = 0;
  for (size_t i = 0; i < n; i++)
    d |= x[i] ^ y[i];
  return d == 0;
}

static void make_key(const char *user, const char *pass, const char *hash, unsigned char out[32]) {
  gnutls_hash_hd_t h;
  memset(out, 0, 32);
  if (gnutls_hash_init(&h, GNUTLS_DIG_SHA256) != 0)
    return;
  gnutls_hash(h, user, strlen(user) + 1);
  gnutls_hash(h, pass, strlen(pass) + 1);
  gnutls_hash(h, hash, strlen(hash) + 1);
  gnutls_hash_deinit(h, out);
}

/* Looks every entry up (constant time in the key); refreshes a hit. */
static int cache_has(cache *c, const unsigned char key[32]) {
  int hit = -1;
  for (size_t i = 0; i < c->n; i++)
    if (c->e[i].used && equal_ct(c->e[i].key, key, 32))
      hit = (int)i;
  if (hit >= 0)
    c->e[hit].used = ++g_clock;
  return hit >= 0;
}

static void cache_put(cache *c, const unsigned char key[32]) {
  size_t victim = 0;
  for (size_t i = 0; i < c->n; i++) {
    if (c->e[i].used && equal_ct(c->e[i].key, key, 32))
      return;
    if (c->e[i].used < c->e[victim].used)
      victim = i;
  }
  memcpy(c->e[victim].key, key, 32);
  c->e[victim].used = ++g_clock;
}

void web_auth_reset(void) {
  pthread_mutex_lock(&g_cache_lock);
  memset(g_ok.e, 0, sizeof g_ok.e);
  memset(g_fail.e, 0, sizeof g_fail.e);
  pthread_mutex_unlock(&g_cache_lock);
  pthread_mutex_lock(&g_bcrypt_lock);
  g_bcrypt_tokens = WEB_AUTH_BCRYPT_BURST;
  g_bcrypt_last_s = 0;
  pthread_mutex_unlock(&g_bcrypt_lock);
}

int web_auth_parse_basic(const char *authorization, char **user, char **pass) {
  *user = *pass = NULL;
  if (!authorization || strncasecmp(authorization, "Basic ", 6) != 0)
    return -1;
  const char *b64 = authorization + 6;
  /* Only the base64 alphabet, as Go's decoder takes it: GnuTLS's would skip
   * a space ("Basic  <b64>"), which Go's net/http answers with a 401.
   * Trailing white space is no part of the field value (RFC 9110 5.5; Go's
   * textproto trims it), so it is dropped first. */
  static const char alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=";
  size_t b64len = strspn(b64, alphabet);
  if (b64[b64len + strspn(b64 + b64len, " \t")] != '\0')
    return -1;
  gnutls_datum_t in = {(unsigned char *)b64, (unsigned)b64len}, out = {NULL, 0};
  if (in.size == 0 || gnutls_base64_decode2(&in, &out) != 0)
    return -1;
  const char *colon = memchr(out.data, ':', out.size);
  int rc = -1;
  if (colon && !memchr(out.data, '\0', out.size)) {
    size_t ulen = (size_t)(colon - (const char *)out.data), plen = out.size - ulen - 1;
    *user = strndup((const char *)out.data, ulen);
    *pass = strndup(colon + 1, plen);
    rc = *user && *pass ? 0 : -1;
    if (rc != 0) {
      web_auth_free_credentials(*user, *pass);
      *user = *pass = NULL;
    }
  }
  explicit_bzero(out.data, out.size);
  gnutls_free(out.data);
  return rc;
}

void web_auth_free_credentials(char *user, char *pass) {
  if (pass)
    explicit_bzero(pass, strlen(pass));
  free(pass);
  free(user);
}

web_auth_result web_auth_check(const web_config *c, const char *user, const char *pass,
                               double now_s) {
  if (!c->nusers)
    return WEB_AUTH_OK;
  if (!user || !pass)
    return WEB_AUTH_DENIED;
  /* An unknown user is checked against a known user's hash (the same cost,
   * so the answer's timing does not tell which names exist) and denied. */
  const char *hash = c->users[0].hash;
  int known = 0;
  for (size_t i = 0; i < c->nusers; i++)
    if (strcmp(c->users[i].name, user) == 0) {
      hash = c->users[i].hash;
      known = 1;
    }
  unsigned char key[32];
  make_key(user, pass, hash, key);
  pthread_mutex_lock(&g_cache_lock);
  int ok = cache_has(&g_ok, key);
  int bad = !ok && cache_has(&g_fail, key);
  pthread_mutex_unlock(&g_cache_lock);
  if (ok)
    return known ? WEB_AUTH_OK : WEB_AUTH_DENIED;
  if (bad)
    return WEB_AUTH_DENIED;
  if (pthread_mutex_trylock(&g_bcrypt_lock) != 0)
    return WEB_AUTH_BUSY;
  if (now_s > g_bcrypt_last_s) {
    g_bcrypt_tokens += (now_s - g_bcrypt_last_s) * WEB_AUTH_BCRYPT_PER_S;
    if (g_bcrypt_tokens > WEB_AUTH_BCRYPT_BURST)
      g_bcrypt_tokens = WEB_AUTH_BCRYPT_BURST;
    g_bcrypt_last_s = now_s;
  }
  if (g_bcrypt_tokens < 1) {
    pthread_mutex_unlock(&g_bcrypt_lock);
    return WEB_AUTH_BUSY;
  }
  g_bcrypt_tokens -= 1;
  const char *out = crypt_rn(pass, hash, &g_crypt, sizeof g_crypt);
  int match = out && strlen(out) == strlen(hash) && equal_ct(out, hash, strlen(hash));
  explicit_bzero(&g_crypt, sizeof g_crypt);
  pthread_mutex_unlock(&g_bcrypt_lock);
  match = match && known;
  pthread_mutex_lock(&g_cache_lock);
  cache_put(match ? &g_ok : &g_fail, key);
  pthread_mutex_unlock(&g_cache_lock);
  return match ? WEB_AUTH_OK : WEB_AUTH_DENIED;
}

/* ---- rate_limit: a token bucket of `burst` tokens, one more every interval ---- */

static pthread_mutex_t g_rate_lock = PTHREAD_MUTEX_INITIALIZER;
static double g_tokens, g_last_s, g_interval_s;
static unsigned g_burst;

int web_rate_allow(const web_config *c, double now_s, double *wait_s) {
  if (c->rate_interval_s <= 0)
    return 1;
  pthread_mutex_lock(&g_rate_lock);
  if (g_interval_s != c->rate_interval_s || g_burst != c->rate_burst) { /* new settings */
    g_interval_s = c->rate_interval_s;
    g_burst = c->rate_burst;
    g_tokens = c->rate_burst;
    g_last_s = now_s;
  }
  g_tokens += (now_s - g_last_s) / g_interval_s;
  if (g_tokens > g_burst)
    g_tokens = g_burst;
  g_last_s = now_s;
  int allow = g_tokens >= 1;
  if (allow)
    g_tokens -= 1;
  else
    *wait_s = (1 - g_tokens) * g_interval_s;
  pthread_mutex_unlock(&g_rate_lock);
  return allow;
}
