/* Basic auth under concurrency (also run under ThreadSanitizer): request
 * threads take the current web configuration, check credentials (bcrypt,
 * caches, the cost bound) and give it back while another thread keeps
 * swapping configurations, as a reload does. The right password is never
 * refused as wrong (only "busy" while bcrypt is spent), a wrong one never
 * accepted, and every configuration is freed once. */
#include <criterion/criterion.h>
#include <crypt.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/web_auth.h"
#include "agent/web_state.h"

#define THREADS 4
#define CHECKS  400
#define SWAPS   50

static char g_hash[CRYPT_OUTPUT_SIZE];
static atomic_int g_wrong_accepted, g_right_denied, g_ok;

static web_config *make_config(void) {
  web_config *c = calloc(1, sizeof *c);
  cr_assert_not_null(c, "out of memory");
  c->users = calloc(1, sizeof *c->users);
  c->users[0].name = strdup("prometheus");
  c->users[0].hash = strdup(g_hash);
  c->nusers = 1;
  return c;
}

static void *requests(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int i = 0; i < CHECKS; i++) {
    web_config *c = web_state_acquire();
    if (!c)
      continue;
    char wrong[32];
    snprintf(wrong, sizeof wrong, "wrong-%d-%d", id, i % 8);
    web_auth_result right = web_auth_check(c, "prometheus", "right", (double)i);
    web_auth_result bad = web_auth_check(c, "prometheus", wrong, (double)i);
    web_state_release(c);
    if (right == WEB_AUTH_DENIED)
      atomic_fetch_add(&g_right_denied, 1);
    if (right == WEB_AUTH_OK)
      atomic_fetch_add(&g_ok, 1);
    if (bad == WEB_AUTH_OK)
      atomic_fetch_add(&g_wrong_accepted, 1);
  }
  return NULL;
}

Test(web_auth_threads, checks_while_reloads_swap_the_configuration, .timeout = 300) {
  char salt[CRYPT_GENSALT_OUTPUT_SIZE];
  struct crypt_data cd;
  memset(&cd, 0, sizeof cd);
  cr_assert_not_null(crypt_gensalt_rn("$2b$", 4, NULL, 0, salt, sizeof salt), "no bcrypt salt");
  const char *h = crypt_rn("right", salt, &cd, sizeof cd);
  cr_assert_not_null(h, "crypt_rn failed");
  snprintf(g_hash, sizeof g_hash, "%s", h);
  web_auth_reset();
  cr_assert_eq(web_state_set(make_config(), 0), 0, "no slot");
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++)
    cr_assert_eq(pthread_create(&t[i], NULL, requests, (void *)(intptr_t)i), 0, "pthread_create");
  for (int i = 0; i < SWAPS; i++)
    cr_assert_eq(web_state_set(make_config(), i % 2), 0, "no slot");
  for (int i = 0; i < THREADS; i++)
    pthread_join(t[i], NULL);
  web_state_set(NULL, 0);
  web_auth_reset();
  cr_assert_eq(atomic_load(&g_wrong_accepted), 0, "a wrong password was accepted");
  cr_assert_eq(atomic_load(&g_right_denied), 0, "the right password was refused as wrong");
  cr_assert_gt(atomic_load(&g_ok), 0, "never accepted");
}
