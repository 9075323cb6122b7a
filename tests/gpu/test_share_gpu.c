/* Two processes sharing a block of an expandable cuda pool (gpupool/share.h)
 * on a real GPU: the exporter allocates and fills a block, sends it over a
 * Unix socket; the importer (a forked child, which starts CUDA only after the
 * fork) maps it, reads the exporter's bytes, writes a pattern with a kernel of
 * its own (share_kernel.cu) and a tail with cudaMemset, and releases it; the
 * exporter reads the importer's values back from its own block.
 * (The lifetime rules do not depend on the backend: tests/unit/test_share.c
 * checks them on the host backend.) Each step prints what it checked; without a device, or where
 * the device cannot export memory as POSIX file descriptors, the test is skipped with the reason.
 */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "gpu_check.h"
#include "gpupool/gpupool.h"
#include "gpupool/share.h"
#include "share_kernel.h"

#define MiB ((size_t)1 << 20)
/* 131 pages of 2 MiB, the last one partly used: three messages of at most
 * SHARE_FDS (64) page descriptors each (pool/share_msg.h) */
#define SIZE       (260 * MiB + 12345)
#define TAIL       (MiB + 345) /* cudaMemset by the importer at the end */
#define FIRST_BYTE 0x11        /* the exporter's fill */
#define TAIL_BYTE  0x5a

/* The importer: plain exit codes (no Criterion in the child); 77 = no GPU. */
static int importer(int sock) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0)
    return 77;
  void *ptr = NULL;
  size_t size = 0;
  gpupool_import *im = NULL;
  gpupool_status st = gpupool_share_import(sock, 0, &ptr, &size, &im);
  if (st != GPUPOOL_OK) {
    fprintf(stderr, "[gpu] importer: gpupool_share_import: %s: %s\n", gpupool_status_string(st),
            gpupool_last_error());
    return st == GPUPOOL_ERR_UNSUPPORTED ? 78 : 10;
  }
  if (size != SIZE) {
    fprintf(stderr, "[gpu] importer: size %zu, want %zu\n", size, (size_t)SIZE);
    return 11;
  }
  uint32_t *host = malloc(size);
  if (!host || cudaMemcpy(host, ptr, size, cudaMemcpyDeviceToHost) != cudaSuccess)
    return 12;
  for (size_t i = 0; i < size; i++)
    if (((unsigned char *)host)[i] != FIRST_BYTE) {
      fprintf(stderr, "[gpu] importer: byte %zu is 0x%02x, the exporter wrote 0x%02x\n", i,
              ((unsigned char *)host)[i], FIRST_BYTE);
      return 13;
    }
  int err = share_fill_words(ptr, (size - TAIL) / 4);
  if (err != 0) {
    fprintf(stderr, "[gpu] importer: the kernel did not launch: %s\n",
            cudaGetErrorString((cudaError_t)err));
    return 14;
  }
  if (cudaMemset((char *)ptr + size - TAIL, TAIL_BYTE, TAIL) != cudaSuccess)
    return 15;
  if (cudaDeviceSynchronize() != cudaSuccess)
    return 16;
  fprintf(stderr,
          "[gpu] importer (pid %d): mapped %zu bytes at %p, read the exporter's 0x%02x in every "
          "byte, wrote a pattern (a kernel) and 0x%02x over the last %zu bytes (cudaMemset)\n",
          (int)getpid(), size, ptr, FIRST_BYTE, TAIL_BYTE, (size_t)TAIL);
  free(host);
  st = gpupool_share_release(im);
  return st == GPUPOOL_OK ? 0 : 17;
}

/* Closes the exporter's end (an importer still waiting sees it closed) and
 * returns the child's exit status. */
static int finish_child(pid_t pid, int sock) {
  close(sock);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
    return -1;
  return WEXITSTATUS(status);
}

Test(share_gpu, importer_writes_exporter_reads, .timeout = 300) {
  int sv[2];
  cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  /* Fork before this process touches CUDA: a child cannot use a CUDA
   * started before the fork. */
  pid_t pid = fork();
  cr_assert_neq(pid, -1);
  if (pid == 0) {
    close(sv[0]);
    _exit(importer(sv[1]));
  }
  close(sv[1]);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    finish_child(pid, sv[0]);
    cr_skip("no CUDA device visible");
  }
  gpu_require("sharing a block of an expandable pool between two processes");

  gpupool_options opt = {.name = "share_gpu",
                         .backend = GPUPOOL_BACKEND_CUDA,
                         .tunables = "expandable_segments:True",
                         .ignore_env = 1};
  gpupool *p = NULL;
  gpupool_status st = gpupool_create(&opt, &p);
  if (st == GPUPOOL_ERR_UNSUPPORTED) {
    finish_child(pid, sv[0]);
    cr_skip("expandable segments unavailable: %s", gpupool_last_error());
  }
  cr_assert_eq(st, GPUPOOL_OK, "gpupool_create: %s", gpupool_last_error());
  void *x = NULL;
  cr_assert_eq(gpupool_malloc(p, &x, SIZE, NULL), GPUPOOL_OK, "%s", gpupool_last_error());
  CUDA_OK(cudaMemset(x, FIRST_BYTE, SIZE));
  CUDA_OK(cudaDeviceSynchronize());

  gpupool_export *ex = NULL;
  st = gpupool_share_export(p, x, sv[0], &ex);
  if (st == GPUPOOL_ERR_UNSUPPORTED) {
    char why[512];
    snprintf(why, sizeof why, "%s", gpupool_last_error());
    finish_child(pid, sv[0]);
    gpupool_free(p, x);
    gpupool_destroy(p);
    cr_skip("the device cannot share memory: %s", why);
  }
  cr_assert_eq(st, GPUPOOL_OK, "gpupool_share_export: %s", gpupool_last_error());
  fprintf(stderr, "[gpu] exporter (pid %d): exported %zu bytes at %p (%zu pages of 2 MiB)\n",
          (int)getpid(), (size_t)SIZE, x, (SIZE + 2 * MiB - 1) / (2 * MiB));

  int ended = 0;
  for (int i = 0; i < 120 && !ended; i++) /* a bound of 120 s, never reached when it works */
    cr_assert_eq(gpupool_share_wait(ex, 1000, &ended), GPUPOOL_OK, "%s", gpupool_last_error());
  int code = finish_child(pid, sv[0]);
  cr_assert_eq(code, 0, "the importer failed (exit %d; 78: unsupported there)", code);
  cr_assert_eq(ended, 1, "the export did not end after the importer released it");

  unsigned char *host = malloc(SIZE);
  cr_assert_not_null(host);
  CUDA_OK(cudaMemcpy(host, x, SIZE, cudaMemcpyDeviceToHost));
  size_t words = (SIZE - TAIL) / 4;
  for (size_t i = 0; i < words; i++) {
    uint32_t w;
    memcpy(&w, host + 4 * i, 4);
    if (w != share_word(i))
      cr_assert_fail("word %zu is 0x%08x, the importer's kernel wrote 0x%08x", i, w, share_word(i));
  }
  for (size_t i = SIZE - TAIL; i < SIZE; i++)
    if (host[i] != TAIL_BYTE)
      cr_assert_fail("byte %zu is 0x%02x, the importer's cudaMemset wrote 0x%02x", i, host[i],
                     TAIL_BYTE);
  free(host);
  fprintf(stderr,
          "[gpu] exporter: the export ended; its block holds the pattern the importer's kernel "
          "wrote (%zu words) "
          "and its cudaMemset tail (%zu bytes of 0x%02x)\n",
          words, (size_t)TAIL, TAIL_BYTE);
  cr_assert_eq(gpupool_free(p, x), GPUPOOL_OK, "%s", gpupool_last_error());
  gpupool_destroy(p);
}
