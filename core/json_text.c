#include "json_text.h"

#include <stdlib.h>
#include <string.h>

#include "utf8.h"

cJSON *json_create_text(const char *text) {
  const unsigned char *s = (const unsigned char *)(text ? text : "");
  size_t n = strlen((const char *)s), bad = 0;
  for (size_t i = 0; i < n;) {
    size_t len = utf8_char_len(s + i, n - i);
    bad += len == 0;
    i += len ? len : 1;
  }
  if (!bad)
    return cJSON_CreateString((const char *)s);
  char *clean = malloc(n + 2 * bad + 1); /* each bad byte becomes 3 */
  if (!clean)
    return NULL;
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    size_t len = utf8_char_len(s + i, n - i);
    if (len) {
      memcpy(clean + o, s + i, len);
      o += len;
      i += len;
    } else {
      memcpy(clean + o, "\xEF\xBF\xBD", 3); /* U+FFFD */
      o += 3;
      i++;
    }
  }
  clean[o] = '\0';
  cJSON *item = cJSON_CreateString(clean);
  free(clean);
  return item;
}

cJSON *json_add_text(cJSON *object, const char *key, const char *text) {
  cJSON *item = json_create_text(text);
  if (item && !cJSON_AddItemToObject(object, key, item)) {
    cJSON_Delete(item);
    return NULL;
  }
  return item;
}
