/* The directories the agent writes into later (trace_file's, oom_dir): the
 * start-time check (checked, not written, so the start creates nothing),
 * and the sync that makes a file renamed into one last. */
#ifndef GPUPOOL_WRITABLE_DIR_H
#define GPUPOOL_WRITABLE_DIR_H

/* 0 when path is a directory this process may create files in; else the
 * errno that says why not: stat(2)'s (ENOENT, ...), ENOTDIR for anything
 * that is not a directory (access(2) alone takes an executable file for
 * one), or access(2)'s (EACCES, EROFS). */
int writable_dir_errno(const char *path);

/* Syncs directory path to the disk, so that the names renamed into it
 * survive a crash (fsync of the files alone keeps their bytes, not their
 * names): 0, or the errno of open(2) or fsync(2). */
int writable_dir_sync(const char *path);

#endif
