#include "cupti_data.h"

const char *cupti_memory_kind_name(int kind) {
  static const char *const names[CUPTI_MEMORY_KINDS] = {"unknown",       "pageable",      "pinned",
                                                        "device",        "array",         "managed",
                                                        "device_static", "managed_static"};
  return kind >= 0 && kind < CUPTI_MEMORY_KINDS ? names[kind] : "unknown";
}
