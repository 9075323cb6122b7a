/* The /ui page's files (agent/ui/), compiled in by agent/ui/embed.cmake. */
#ifndef GPUPOOL_UI_ASSETS_H
#define GPUPOOL_UI_ASSETS_H

#include <stddef.h>

typedef struct ui_asset {
  const char *name;         /* "index.html", "ui.js", ... */
  const char *content_type; /* with charset */
  const char *etag;         /* quoted: "\"0123abcd...\"" (SHA-256 prefix) */
  const unsigned char *data;
  size_t len;
} ui_asset;

extern const ui_asset ui_assets[];
extern const unsigned ui_asset_count;

#endif
