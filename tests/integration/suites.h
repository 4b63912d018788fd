/* The integration suites: each SUITE(name) needs Suite *name_suite(void). */
SUITE(migrate)
SUITE(smoke)
SUITE(shadow)
SUITE(crash)
SUITE(fencing)
