/* GET /: a small HTML page linking the endpoints, with the version, the
 * hostname and the live pools. */
#ifndef GPUPOOL_HTTP_INDEX_H
#define GPUPOOL_HTTP_INDEX_H

#include "endpoint.h"

/* hostname: shown on the page. */
void index_endpoint(const endpoint_args *args, endpoint_body *out, const char *hostname);

#endif
