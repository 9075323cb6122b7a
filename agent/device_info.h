/* The GPUs of the process as the CUDA driver names them (ordinal, UUID,
 * name, total memory) and, where the application already has a context on
 * them, their free memory. Read by the sampler thread; a scrape only copies
 * the last reading. The agent never initialises the driver nor creates a
 * context: until the application has initialised CUDA the table is empty. */
#ifndef GPUPOOL_DEVICE_INFO_H
#define GPUPOOL_DEVICE_INFO_H

#include <stddef.h>
#include <stdint.h>

#define DEVICE_INFO_MAX 64
#define DEVICE_UUID_MAX 48 /* "GPU-" + 36 */

typedef struct device_entry {
  int ordinal;
  char uuid[DEVICE_UUID_MAX];
  char name[96];
  uint64_t total_bytes;
  uint64_t free_bytes;
  int free_known; /* the device's primary context was active: free_bytes is read */
} device_entry;

/* Reads the driver (sampler thread); returns the number of devices. */
size_t device_info_refresh(void);
/* Copies the last reading (at most max entries); returns how many. */
size_t device_info_copy(device_entry *out, size_t max);
/* Forgets the reading (agent stop). */
void device_info_clear(void);

/* Runs fn(arg) with the primary context of device `ordinal` current on this
 * thread, only when the application has made that context active; 0 when fn
 * ran, -1 otherwise. Runtime calls inside fn then use that context instead
 * of creating one. */
int device_info_in_primary_ctx(int ordinal, void (*fn)(void *arg), void *arg);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi and dcgm-exporter
 * write it. out has room for DEVICE_UUID_MAX bytes. */
void device_uuid_format(const unsigned char uuid[16], char *out);

#endif
