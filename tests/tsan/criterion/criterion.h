/* A small Criterion-compatible harness for the ThreadSanitizer build only.
 * Criterion itself cannot start under TSan (its BoxFort arena fails to map:
 * Snaipe/Criterion#274), so the threaded tests are compiled against this
 * header instead: the same Test() and cr_* macros, tests run one after the
 * other in one process (TSan watches them all), a failed assertion fails
 * the run. Only what the test files use is provided. */
#ifndef GPUPOOL_TSAN_CRITERION_H
#define GPUPOOL_TSAN_CRITERION_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

struct criterion_test_extra_data {
  int unused;
};

typedef struct crs_test {
  const char *suite, *name;
  void (*fn)(void);
  void (*init)(void);
  void (*fini)(void);
  double timeout;
  bool disabled;
  const char *description;
  int signal, exit_code;
  struct crs_test *next;
} crs_test;

void crs_register(crs_test *t);
void crs_check(int ok, int fatal, const char *file, int line, const char *expr, const char *fmt,
               ...) __attribute__((format(printf, 6, 7)));
void crs_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void crs_log(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define TestSuite(...)
/* Macro parameters are not called suite/name: they would replace the field
 * designators below. */
#define Test(S_, N_, ...)                                                                          \
  static void S_##_##N_##_impl(void);                                                              \
  static crs_test S_##_##N_##_desc = {                                                             \
      .suite = #S_, .name = #N_, .fn = S_##_##N_##_impl, __VA_ARGS__};                             \
  __attribute__((constructor)) static void S_##_##N_##_reg(void) {                                 \
    crs_register(&S_##_##N_##_desc);                                                               \
  }                                                                                                \
  static void S_##_##N_##_impl(void)

/* The format passed on starts with ": " so that it is never empty (GCC's
 * -Wformat-zero-length) and stays checked when a message follows. */
#define CRS_CHECK(fatal, cond, expr, ...)                                                          \
  crs_check(!!(cond), fatal, __FILE__, __LINE__, expr, ": " __VA_ARGS__)

#define cr_assert(c, ...)              CRS_CHECK(1, c, #c, __VA_ARGS__)
#define cr_expect(c, ...)              CRS_CHECK(0, c, #c, __VA_ARGS__)
#define cr_assert_not(c, ...)          CRS_CHECK(1, !(c), "!(" #c ")", __VA_ARGS__)
#define cr_expect_not(c, ...)          CRS_CHECK(0, !(c), "!(" #c ")", __VA_ARGS__)
#define CRS_CMP(f, a, op, b, ...)      CRS_CHECK(f, (a)op(b), #a " " #op " " #b, __VA_ARGS__)
#define cr_assert_eq(a, b, ...)        CRS_CMP(1, a, ==, b, __VA_ARGS__)
#define cr_expect_eq(a, b, ...)        CRS_CMP(0, a, ==, b, __VA_ARGS__)
#define cr_assert_neq(a, b, ...)       CRS_CMP(1, a, !=, b, __VA_ARGS__)
#define cr_expect_neq(a, b, ...)       CRS_CMP(0, a, !=, b, __VA_ARGS__)
#define cr_assert_lt(a, b, ...)        CRS_CMP(1, a, <, b, __VA_ARGS__)
#define cr_expect_lt(a, b, ...)        CRS_CMP(0, a, <, b, __VA_ARGS__)
#define cr_assert_leq(a, b, ...)       CRS_CMP(1, a, <=, b, __VA_ARGS__)
#define cr_expect_leq(a, b, ...)       CRS_CMP(0, a, <=, b, __VA_ARGS__)
#define cr_assert_gt(a, b, ...)        CRS_CMP(1, a, >, b, __VA_ARGS__)
#define cr_expect_gt(a, b, ...)        CRS_CMP(0, a, >, b, __VA_ARGS__)
#define cr_assert_geq(a, b, ...)       CRS_CMP(1, a, >=, b, __VA_ARGS__)
#define cr_expect_geq(a, b, ...)       CRS_CMP(0, a, >=, b, __VA_ARGS__)
#define cr_assert_null(p, ...)         CRS_CHECK(1, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_expect_null(p, ...)         CRS_CHECK(0, (p) == NULL, #p " == NULL", __VA_ARGS__)
#define cr_assert_not_null(p, ...)     CRS_CHECK(1, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_expect_not_null(p, ...)     CRS_CHECK(0, (p) != NULL, #p " != NULL", __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...)    CRS_CHECK(1, !strcmp(a, b), #a " == " #b, __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...)    CRS_CHECK(0, !strcmp(a, b), #a " == " #b, __VA_ARGS__)
#define cr_assert_str_neq(a, b, ...)   CRS_CHECK(1, strcmp(a, b), #a " != " #b, __VA_ARGS__)
#define cr_expect_str_neq(a, b, ...)   CRS_CHECK(0, strcmp(a, b), #a " != " #b, __VA_ARGS__)
#define cr_assert_arr_eq(a, b, n, ...) CRS_CHECK(1, !memcmp(a, b, n), #a " == " #b, __VA_ARGS__)
#define cr_expect_arr_eq(a, b, n, ...) CRS_CHECK(0, !memcmp(a, b, n), #a " == " #b, __VA_ARGS__)
#define cr_assert_fail(...)            CRS_CHECK(1, 0, "fail", __VA_ARGS__)
#define cr_skip(...)                   crs_skip("skipped: " __VA_ARGS__)
#define cr_skip_test(...)              crs_skip("skipped: " __VA_ARGS__)
#define cr_log_info(...)               crs_log("info", __VA_ARGS__)
#define cr_log_warn(...)               crs_log("warn", __VA_ARGS__)
#define cr_log_error(...)              crs_log("error", __VA_ARGS__)

#endif
