#include "page_crew.h"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/errors.h"

/* One thread's part of a run: n pages from addr. */
typedef struct crew_share {
  int unmap; /* 0: map handles there; 1: unmap */
  backend *be;
  char *addr;
  void *const *handles;
  size_t n;
  gpupool_status st; /* the backend call's status */
  char why[512]; /* the helper's gpupool_last_error() where st failed (a backend call's reason) */
} crew_share;

typedef struct crew_helper {
  struct page_crew *crew;
  pthread_t thread;
  sem_t go; /* posted when share is set (NULL: stop) */
  crew_share *share;
} crew_helper;

struct page_crew {
  pthread_mutex_t busy; /* held by the thread whose run the helpers serve */
  sem_t done;           /* posted by a helper when its share is done */
  pid_t pid;            /* the helpers live in this process only */
  unsigned n;           /* helpers started */
  crew_helper helper[PAGE_CREW_MAX];
};

static void share_run(crew_share *s) {
  const backend_vmm_ops *vmm = s->be->ops->vmm;
  s->st = s->unmap ? vmm->unmap(s->be, s->addr, s->n) : vmm->map(s->be, s->addr, s->handles, s->n);
  if (s->st != GPUPOOL_OK) /* the reason is this thread's: the asking thread reports it */
    snprintf(s->why, sizeof s->why, "%s", gpupool_last_error());
}

static void sem_wait_intr(sem_t *s) {
  while (sem_wait(s) != 0) /* EINTR only: the semaphores are valid */
    ;
}

static void *helper_main(void *arg) {
  crew_helper *h = arg;
  pthread_setname_np(pthread_self(), "gpupool-crew");
  for (;;) {
    sem_wait_intr(&h->go);
    if (!h->share)
      return NULL;
    share_run(h->share);
    sem_post(&h->crew->done);
  }
}

gpupool_status page_crew_create(unsigned helpers, page_crew **out) {
  *out = NULL;
  if (helpers == 0)
    return GPUPOOL_OK;
  if (helpers > PAGE_CREW_MAX)
    helpers = PAGE_CREW_MAX;
  page_crew *c = calloc(1, sizeof *c);
  if (!c || sem_init(&c->done, 0, 0) != 0) {
    free(c);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "page crew: out of host memory");
  }
  pthread_mutex_init(&c->busy, NULL);
  c->pid = getpid();
  /* the helpers block every signal: the program's handlers run on its own threads */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  for (unsigned i = 0; i < helpers; i++) {
    crew_helper *h = &c->helper[i];
    h->crew = c;
    if (sem_init(&h->go, 0, 0) != 0)
      break;
    if (pthread_create(&h->thread, NULL, helper_main, h) != 0) {
      sem_destroy(&h->go);
      break;
    }
    c->n++;
  }
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (c->n == 0) {
    page_crew_destroy(c);
    return pool_fail(GPUPOOL_ERR_HOST_OOM, "page crew: no helper thread could be started");
  }
  *out = c;
  return GPUPOOL_OK;
}

void page_crew_destroy(page_crew *c) {
  if (!c)
    return;
  /* A forked child has no helpers to stop (only the thread that forked
   * lives there): it frees nothing either, as the semaphores' state is the
   * parent's. */
  if (c->pid != getpid())
    return;
  for (unsigned i = 0; i < c->n; i++) {
    c->helper[i].share = NULL;
    sem_post(&c->helper[i].go);
    pthread_join(c->helper[i].thread, NULL);
    sem_destroy(&c->helper[i].go);
  }
  sem_destroy(&c->done);
  pthread_mutex_destroy(&c->busy);
  free(c);
}

unsigned page_crew_size(const page_crew *c) {
  return c ? c->n : 0;
}

/* Splits the run into shares and runs them: the first on this thread, the
 * others on helpers. Returns the number of shares, 0 where the run is not
 * split (no crew, a short run, another run under way, a forked child). */
static size_t crew_run(page_crew *c, crew_share *sh, int unmap, backend *be, void *addr,
                       void *const *handles, size_t n) {
  if (!c || n < 2 * PAGE_CREW_SHARE_MIN || c->pid != getpid() ||
      pthread_mutex_trylock(&c->busy) != 0)
    return 0;
  size_t k = n / PAGE_CREW_SHARE_MIN;
  if (k > (size_t)c->n + 1)
    k = (size_t)c->n + 1;
  for (size_t i = 0, at = 0; i < k; i++) {
    size_t len = n / k + (i < n % k);
    sh[i] = (crew_share){.unmap = unmap,
                         .be = be,
                         .addr = (char *)addr + at * be->page_size,
                         .handles = handles ? handles + at : NULL,
                         .n = len};
    at += len;
  }
  for (size_t i = 1; i < k; i++) {
    c->helper[i - 1].share = &sh[i];
    sem_post(&c->helper[i - 1].go);
  }
  share_run(&sh[0]);
  for (size_t i = 1; i < k; i++)
    sem_wait_intr(&c->done);
  pthread_mutex_unlock(&c->busy);
  return k;
}

gpupool_status page_crew_map(page_crew *c, backend *be, void *addr, void *const *handles,
                             size_t n) {
  crew_share sh[PAGE_CREW_MAX + 1];
  size_t k = crew_run(c, sh, 0, be, addr, handles, n);
  if (k == 0)
    return be->ops->vmm->map(be, addr, handles, n);
  size_t failed = k;
  for (size_t i = 0; i < k && failed == k; i++)
    if (sh[i].st != GPUPOOL_OK)
      failed = i;
  if (failed == k)
    return GPUPOOL_OK;
  /* All or none, as the backend's own call: each share mapped all of its
   * pages or none of them. */
  for (size_t i = 0; i < k; i++)
    if (sh[i].st == GPUPOOL_OK)
      be->ops->vmm->unmap(be, sh[i].addr, sh[i].n);
  return pool_fail(sh[failed].st, "%s", sh[failed].why);
}

gpupool_status page_crew_unmap(page_crew *c, backend *be, void *addr, size_t n) {
  crew_share sh[PAGE_CREW_MAX + 1];
  size_t k = crew_run(c, sh, 1, be, addr, NULL, n);
  if (k == 0)
    return be->ops->vmm->unmap(be, addr, n);
  for (size_t i = 0; i < k; i++) /* a reason reported on a helper becomes this thread's */
    if (sh[i].st != GPUPOOL_OK)
      return pool_fail(sh[i].st, "%s", sh[i].why);
  return GPUPOOL_OK;
}
