/* GET /ui: the live view in the browser. /ui and /ui/ serve the page,
 * /ui/<asset> its script and style (compiled in: agent/ui/), /ui/state.json
 * and /ui/blocks.json the data it polls (agent/ui_data.c, docs/ui.md). */
#ifndef GPUPOOL_UI_H
#define GPUPOOL_UI_H

#include "endpoint.h"

void ui_endpoint(const endpoint_args *args, endpoint_body *out);

/* agent/ui_data.c */
void ui_state_json(const endpoint_args *args, endpoint_body *out);
void ui_blocks_json(const endpoint_args *args, endpoint_body *out);

#endif
