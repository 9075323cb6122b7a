/* HTTPS for the agent's server: the libmicrohttpd options (GnuTLS) for a web
 * configuration's tls_server_config, and the per-connection policy
 * libmicrohttpd has no option for: client certificates requested or
 * required and verified during the handshake (so that a refused client
 * fails the handshake, as with Go's crypto/tls), client_allowed_sans, and a
 * count of connections that closed before their handshake completed. */
#ifndef GPUPOOL_HTTP_TLS_H
#define GPUPOOL_HTTP_TLS_H

#include <microhttpd.h>

#include "web_config.h"

#define HTTP_TLS_MAX_OPTIONS 8

/* Fills opts (for MHD_OPTION_ARRAY, ending with MHD_OPTION_END) and adds
 * MHD_USE_TLS to *flags when c serves TLS; c must outlive the daemon. */
void http_tls_options(const web_config *c, struct MHD_OptionItem *opts, unsigned *flags);

#endif
