/* Internal invariants, checked in debug builds only (as mimalloc's
 * mi_assert_internal): gp_assert_internal(cond) aborts with the condition,
 * file and line when cond is false in a Debug build (no NDEBUG), and
 * compiles to nothing in Release and RelWithDebInfo, so the hot path pays
 * nothing where speed is measured. For bugs of the library only, never for
 * bad input (that is a status and gpupool_last_error()). */
#ifndef GPUPOOL_ASSERT_H
#define GPUPOOL_ASSERT_H

#ifndef NDEBUG
#define gp_assert_internal(cond)                                                                   \
  ((cond) ? (void)0 : gp_assert_fail(#cond, __FILE__, __LINE__, __func__))
__attribute__((noreturn)) void gp_assert_fail(const char *cond, const char *file, int line,
                                              const char *func);
#else
#define gp_assert_internal(cond) ((void)0)
#endif

#endif
