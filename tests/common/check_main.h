/*
 * check_main.h — the main() of a Check test program: runs the suite that
 * `make_suite()` builds and exits non-zero when a test failed.
 *     static Suite *suite(void) { ... }
 *     PCGC_CHECK_MAIN(suite)
 */
#ifndef PCGC_TESTS_CHECK_MAIN_H
#define PCGC_TESTS_CHECK_MAIN_H

#include <check.h>
#include <stdlib.h>

#define PCGC_CHECK_MAIN(make_suite)                     \
  int main(void) {                                      \
    SRunner *sr = srunner_create(make_suite());         \
    srunner_run_all(sr, CK_NORMAL);                     \
    int failed = srunner_ntests_failed(sr);             \
    srunner_free(sr);                                   \
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;        \
  }

#endif
