/* The unit suites: each SUITE(name) needs Suite *name_suite(void). */
SUITE(duration)
SUITE(jsonptr)
SUITE(def)
SUITE(check_cli)
SUITE(engine)
SUITE(decode)
SUITE(pgarr)
SUITE(receiver)
