/* A test-and-test-and-set spinlock for the pool's short critical sections:
 * one atomic exchange to take it when free, no system call unless another
 * thread holds it for long (then it yields). */
#ifndef GPUPOOL_SPINLOCK_H
#define GPUPOOL_SPINLOCK_H

#include <sched.h>
#include <stdatomic.h>

typedef struct spinlock {
  _Atomic int held;
} spinlock;

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static inline void spin_lock(spinlock *l) {
  while (atomic_exchange_explicit(&l->held, 1, memory_order_acquire)) {
    for (unsigned n = 0; atomic_load_explicit(&l->held, memory_order_relaxed); n++) {
      if (n < 128)
        cpu_relax();
      else
        sched_yield();
    }
  }
}

static inline void spin_unlock(spinlock *l) {
  atomic_store_explicit(&l->held, 0, memory_order_release);
}

#endif
