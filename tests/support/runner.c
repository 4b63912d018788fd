/*
 * runner - the main() of one test tier.
 *
 * The tier's suites.h lists its suites; CK_RUN_SUITE (set by ctest) picks
 * one, and with it unset every suite runs. The exit status is non-zero when
 * any check failed.
 */
#include <check.h>
#include <stdlib.h>

#define SUITE(name) Suite *name##_suite(void);
#include "suites.h"
#undef SUITE

int main(void)
{
    SRunner *runner = srunner_create(NULL);

#define SUITE(name) srunner_add_suite(runner, name##_suite());
#include "suites.h"
#undef SUITE

    srunner_run_all(runner, CK_NORMAL);
    int failed = srunner_ntests_failed(runner);
    srunner_free(runner);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
