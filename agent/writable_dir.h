/* The start-time check of the directories the agent writes into later
 * (trace_file's, oom_dir): checked, not written, so the start creates
 * nothing. */
#ifndef GPUPOOL_WRITABLE_DIR_H
#define GPUPOOL_WRITABLE_DIR_H

/* 0 when path is a directory this process may create files in; else the
 * errno that says why not: stat(2)'s (ENOENT, ...), ENOTDIR for anything
 * that is not a directory (access(2) alone takes an executable file for
 * one), or access(2)'s (EACCES, EROFS). */
int writable_dir_errno(const char *path);

#endif
