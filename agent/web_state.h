/* The web configuration the HTTP server applies to each request (basic auth
 * users, headers, rate limit), swapped whole by a reload while requests run:
 * a request holds a reference to the one it started with. */
#ifndef GPUPOOL_WEB_STATE_H
#define GPUPOOL_WEB_STATE_H

#include "web_config.h"

/* Installs c (taking it over; NULL = no web configuration) and whether
 * /healthz answers without basic auth. The previous one is freed when its
 * last request ends. -1 (c freed, the old one kept) when too many old ones
 * are still in use. */
int web_state_set(web_config *c, int healthz_open);
/* The current configuration with a reference held (NULL when none); give it
 * back with web_state_release. */
web_config *web_state_acquire(void);
/* Takes one more reference on c (not NULL). */
web_config *web_state_ref(web_config *c);
void web_state_release(web_config *c);
int web_state_healthz_open(void);

#endif
