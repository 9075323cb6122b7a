/* Test-only hooks of the host backend, compiled in a testing build only
 * (GPUPOOL_TESTING, set when the tests are built; never in the shared
 * library's exports, see gpupool.map). */
#ifndef GPUPOOL_BACKEND_HOST_TESTING_H
#define GPUPOOL_BACKEND_HOST_TESTING_H

#ifdef GPUPOOL_TESTING
/* fn(arg) runs at the start of every device allocation of every host
 * backend (a segment or a vmm page), on the allocating thread, with the
 * pool's slow lock held: a test holds a pool "in a slow device call" by
 * blocking in fn. NULL clears it. */
void backend_host_testing_set_alloc_hook(void (*fn)(void *arg), void *arg);
#endif

#endif
