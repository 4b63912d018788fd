/*
 * runner - the main() of one test tier.
 *
 * The tier's suites.h lists its suites; CK_RUN_SUITE (set by ctest) picks
 * one, and with it unset every suite runs. The exit status is non-zero when
 * any check failed, and when no test ran at all: check runs nothing, and
 * reports no failure, for a CK_RUN_SUITE that names no suite (a suite whose
 * suite_create() name is not its SUITE() name), which would make its ctest
 * entry pass without testing anything.
 */
#include <check.h>
#include <stdio.h>
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
    int failed = srunner_ntests_failed(runner), ran = srunner_ntests_run(runner);
    srunner_free(runner);
    if (ran == 0) {
        const char *only = getenv("CK_RUN_SUITE");
        fprintf(stderr,
                "no test ran: %s%s%s names no suite of this tier whose suite_create() name "
                "matches its SUITE() line in suites.h\n",
                only != NULL ? "CK_RUN_SUITE=" : "", only != NULL ? only : "the tier",
                only != NULL ? "" : " (empty suites.h?)");
        return EXIT_FAILURE;
    }
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
