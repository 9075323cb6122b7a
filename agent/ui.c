#include "ui.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http_accept.h"
#include "http_gzip.h"
#include "ui_assets.h"

/* The page loads only its own script and style and fetches only this agent;
 * nothing inline, no frames, no forms. */
#define UI_CSP                                                                                     \
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "  \
  "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

#define UI_ASSETS_MAX 8

/* The security headers of every /ui answer: alone on the page's and the
 * assets' error answers (400, 404, 503), before an ETag on the assets'. */
#define UI_SECURITY_HEADERS 6 /* three names and values */
static const char *const security_headers[UI_SECURITY_HEADERS + 1] = {"Content-Security-Policy",
                                                                      UI_CSP,
                                                                      "X-Content-Type-Options",
                                                                      "nosniff",
                                                                      "Referrer-Policy",
                                                                      "no-referrer",
                                                                      NULL};

/* Each asset as served: as it is, and gzip'd for a client that accepts
 * gzip (where this build has zlib and deflating makes it smaller). Each form
 * has an ETag of its own (RFC 9110 8.8.3: a validator names one
 * representation), the gzip'd one the asset's with "-gzip", so that a
 * cache never takes one for the other. Made once: the assets are fixed. */
typedef struct asset_form {
  const unsigned char *data;
  size_t len;
  const char *headers[UI_SECURITY_HEADERS + 3]; /* the security headers, then its ETag */
} asset_form;
typedef struct asset_forms {
  asset_form plain, gzip; /* gzip.data NULL: served as it is only */
  char gzip_etag[48];
} asset_forms;
static asset_forms forms[UI_ASSETS_MAX];
static pthread_once_t forms_once = PTHREAD_ONCE_INIT;

static void set_headers(asset_form *f, const char *etag) {
  memcpy(f->headers, security_headers, UI_SECURITY_HEADERS * sizeof *f->headers);
  f->headers[UI_SECURITY_HEADERS] = "ETag", f->headers[UI_SECURITY_HEADERS + 1] = etag;
  f->headers[UI_SECURITY_HEADERS + 2] = NULL;
}

static void make_forms(void) {
  for (unsigned i = 0; i < ui_asset_count && i < UI_ASSETS_MAX; i++) {
    const ui_asset *a = &ui_assets[i];
    asset_forms *f = &forms[i];
    f->plain.data = a->data;
    f->plain.len = a->len;
    set_headers(&f->plain, a->etag);
    char *zipped;
    size_t n;
    if (http_gzip_level((const char *)a->data, a->len, 9, &zipped, &n) != 0)
      continue;
    if (n >= a->len) { /* a small file: gzip's header and trailer outweigh the saving */
      free(zipped);
      continue;
    }
    /* the asset's quoted ETag, its closing quote replaced */
    snprintf(f->gzip_etag, sizeof f->gzip_etag, "%.*s-gzip\"", (int)strlen(a->etag) - 1, a->etag);
    f->gzip.data = (const unsigned char *)zipped; /* kept for the process's life, as the assets */
    f->gzip.len = n;
    set_headers(&f->gzip, f->gzip_etag);
  }
}

static const ui_asset *find_asset(const char *name) {
  for (unsigned i = 0; i < ui_asset_count && i < UI_ASSETS_MAX; i++)
    if (strcmp(ui_assets[i].name, name) == 0)
      return &ui_assets[i];
  return NULL;
}

/* Whether an If-None-Match header names etag (a list, or "*"). */
static int etag_matches(const char *header, const char *etag) {
  if (!header)
    return 0;
  if (strcmp(header, "*") == 0)
    return 1;
  size_t n = strlen(etag);
  for (const char *p = header; (p = strstr(p, etag)) != NULL; p += n) {
    int starts = p == header || p[-1] == ' ' || p[-1] == ',' || p[-1] == '/';
    int ends = p[n] == '\0' || p[n] == ',' || p[n] == ' ';
    if (starts && ends)
      return 1;
  }
  return 0;
}

/* Whether v names asset a's content: its ETag's hex digits. */
static int names_content(const char *v, const ui_asset *a) {
  size_t n = strlen(a->etag) - 2; /* the ETag is quoted */
  return v && strlen(v) == n && strncmp(v, a->etag + 1, n) == 0;
}

static void serve_asset(const endpoint_args *args, endpoint_body *out, const ui_asset *a) {
  /* Scripts and styles are named by their hash (?v=) in the page: a changed
   * file is a new URL, so they may be kept for good; fetched without it, or
   * with another file's hash (a stale page), they are revalidated like the
   * page. */
  int is_page = strcmp(a->name, "index.html") == 0;
  /* the page's pool and device are read by its script; checked here */
  static const char *const page_params[] = {"pool", "device", NULL};
  static const char *const asset_params[] = {"v", NULL};
  const char *const *names = is_page ? page_params : asset_params;
  const char *expected = is_page ? "pool or device" : "v";
  endpoint_params p;
  endpoint_count_params(args, names, &p);
  if (p.unknown) {
    char shown[64];
    endpoint_printable(shown, sizeof shown, p.unknown);
    endpoint_bad_request(out, "%s: unknown parameter '%s' (expected %s)", args->path, shown,
                         expected);
    return;
  }
  if (p.repeated) {
    endpoint_bad_request(out, "%s: parameter '%s' given more than once", args->path, p.repeated);
    return;
  }
  const char *v = args->get(args->ctx, names[0]);
  if (v && !*v) {
    endpoint_bad_request(out, "%s: bad %s '': expected %s", args->path, names[0],
                         is_page ? "a pool name" : "the file's hash");
    return;
  }
  int device; /* read by the page's script: only checked here */
  if (is_page && endpoint_device_param(args, args->path, &device, out) != 0)
    return;
  pthread_once(&forms_once, make_forms);
  const asset_forms *f = &forms[a - ui_assets];
  const asset_form *form =
      f->gzip.data && http_accepts_gzip(args->accept_encoding) ? &f->gzip : &f->plain;
  out->cache_control =
      !is_page && names_content(v, a) ? "public, max-age=31536000, immutable" : "no-cache";
  out->headers = form->headers;
  if (etag_matches(args->if_none_match, form->headers[UI_SECURITY_HEADERS + 1])) {
    out->status = 304;
    out->len = form->len;
    return;
  }
  out->status = 200;
  out->content_type = a->content_type;
  if (form == &f->gzip)
    out->content_encoding = "gzip";
  out->data = malloc(form->len ? form->len : 1);
  if (!out->data) {
    endpoint_out_of_memory(out, "serving /ui");
    return;
  }
  memcpy(out->data, form->data, form->len);
  out->len = form->len;
}

void ui_endpoint(const endpoint_args *args, endpoint_body *out) {
  const char *rest = args->path + strlen("/ui");
  if (*rest == '/')
    rest++;
  if (strcmp(rest, "state.json") == 0)
    return ui_state_json(args, out);
  if (strcmp(rest, "blocks.json") == 0)
    return ui_blocks_json(args, out);
  const ui_asset *a = find_asset(*rest ? rest : "index.html");
  if (!a || strcmp(rest, "index.html") == 0)
    endpoint_text(out, 404,
                  "not found: /ui serves the page, /ui/state.json and /ui/blocks.json its data\n");
  else
    serve_asset(args, out, a);
  if (out->status >= 400)
    out->headers = security_headers;
}
