/* fsync that records the files it syncs and fails on demand, for the tests
 * of durable writes. A test that uses these is linked with -Wl,--wrap=fsync
 * (tests/CMakeLists.txt, names ending in _fsync_fail): every fsync of the
 * test and of the statically linked library goes through fsync_record.c. */
#ifndef GPUPOOL_TEST_FSYNC_RECORD_H
#define GPUPOOL_TEST_FSYNC_RECORD_H

/* Forgets the files synced so far, and fails no sync. */
void fsync_record_reset(void);
/* How many syncs were recorded since the reset (at most 16 are kept). */
int fsync_record_count(void);
/* The path the i-th synced file (or directory) had when it was synced. */
const char *fsync_record_path(int i);
/* From now on, a sync of a path that ends in suffix fails with EIO (NULL:
 * none fails). */
void fsync_record_fail_suffix(const char *suffix);

#endif
