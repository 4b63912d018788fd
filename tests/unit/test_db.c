/*
 * test_db - the pure parts of common/db.c: what a connection failure
 * means (retry or give up), and that no password reaches a message, from
 * libpq's parse errors (which quote what they could not parse) or from
 * anything else it says.
 */
#include "common/db.h"
#include "testlib.h"

#include <check.h>
#include <stdlib.h>
#include <string.h>

/* Runs libpq's own parser on conninfo and scrubs what it says. */
static const char *parse_error(const char *conninfo, char *buf, size_t buf_size)
{
    char *why = NULL;
    PQconninfoOption *opts = PQconninfoParse(conninfo, &why);
    ck_assert_msg(opts == NULL, "expected %s not to parse", conninfo);
    ck_assert_ptr_nonnull(why);
    db_scrub(conninfo, why, buf, buf_size);
    PQfreemem(why);
    return buf;
}

START_TEST(unparseable_passwords_are_not_echoed)
{
    /* Each is a password libpq cannot parse; before db_scrub its message
     * quoted the password (or the whole URI holding it). */
    static const struct {
        const char *conninfo, *secret;
    } cases[] = {
        {"postgresql://steward:ab%zzSECRET@127.0.0.1:1/db", "SECRET"},
        {"postgresql://steward:SECRET%@127.0.0.1:1/db", "SECRET"},
        {"postgresql://steward:SECRET%00x@127.0.0.1:1/db", "SECRET"},
        {"postgresql://steward:SECRET@[::1/db", "SECRET"},
        {"host=127.0.0.1 port=1 password=my SECRET", "SECRET"},
        {"host=127.0.0.1 password='SECRET", "SECRET"},
        {"host=127.0.0.1 password=x'SECRET' 'y", "SECRET"},
    };
    char buf[512], errstr[512];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        parse_error(cases[i].conninfo, buf, sizeof buf);
        ck_assert_msg(strstr(buf, cases[i].secret) == NULL, "%s: %s", cases[i].conninfo, buf);
        ck_assert_msg(buf[0] != '\0', "%s: nothing left of the message", cases[i].conninfo);
        ck_assert_int_eq(db_check_conninfo(cases[i].conninfo, errstr, sizeof errstr), ERR_INVALID);
        ck_assert_msg(strstr(errstr, cases[i].secret) == NULL, "%s", errstr);
        ck_assert_msg(strstr(errstr, "cannot be parsed") != NULL, "%s", errstr);
    }
    /* What is not a secret stays: the name of an unknown option. */
    parse_error("host=x passwrd=SECRET", buf, sizeof buf);
    ck_assert_str_eq(buf, "invalid connection option \"passwrd\"\n");
    parse_error("postgresql://h/db?passwrd=SECRET", buf, sizeof buf);
    ck_assert_msg(strstr(buf, "passwrd") != NULL && strstr(buf, "SECRET") == NULL, "%s", buf);
}
END_TEST

START_TEST(parsed_passwords_are_replaced_wherever_they_appear)
{
    static const struct {
        const char *conninfo, *password;
    } cases[] = {
        {"postgresql://steward:p%25SECRET@127.0.0.1:1/db", "p%SECRET"},
        {"postgresql://steward:p%2525SECRET@127.0.0.1:1/db", "p%25SECRET"},
        {"postgresql://steward:with%20a%20SECRET@127.0.0.1:1/db", "with a SECRET"},
        {"postgresql://steward:q%27uo%22te@127.0.0.1:1/db", "q'uo\"te"},
        {"host=127.0.0.1 password='p%SECRET'", "p%SECRET"},
        {"host=127.0.0.1 password='with a SECRET'", "with a SECRET"},
        {"host=127.0.0.1 password='q\\'uo\"te'", "q'uo\"te"},
        {"host=127.0.0.1 password=p%25", "p%25"},
    };
    char message[512], buf[512], shown[512];

    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(message, sizeof message, "FATAL: something about \"%s\" and %s again",
                 cases[i].password, cases[i].password);
        db_scrub(cases[i].conninfo, message, buf, sizeof buf);
        ck_assert_msg(strstr(buf, cases[i].password) == NULL, "%s: %s", cases[i].conninfo, buf);
        ck_assert_str_eq(buf, "FATAL: something about \"********\" and ******** again");
        db_redact(cases[i].conninfo, shown, sizeof shown);
        ck_assert_msg(strstr(shown, cases[i].password) == NULL && strstr(shown, "********"), "%s",
                      shown);
    }
    /* No password: the message is left as it is. */
    db_scrub("host=127.0.0.1 port=1", "Connection refused", buf, sizeof buf);
    ck_assert_str_eq(buf, "Connection refused");
    /* A small buffer cuts, it never overflows. */
    db_scrub("password=abc", "abc abc abc", buf, 12);
    ck_assert_str_eq(buf, "******** **");
}
END_TEST

START_TEST(connection_failures_are_classified)
{
    static const struct {
        const char *message;
        err_class_t cls;
    } cases[] = {
        {"connection to server at \"127.0.0.1\", port 1 failed: Connection refused", ERR_TRANSIENT},
        {"connection to server at \"10.0.0.1\", port 5432 failed: timeout expired", ERR_TRANSIENT},
        {"could not translate host name \"db\" to address: Name or service not known",
         ERR_TRANSIENT},
        {"connection to server at \"h\", port 5432 failed: FATAL:  the database system is "
         "starting up",
         ERR_TRANSIENT},
        {"connection to server at \"h\", port 5432 failed: FATAL:  the database system is "
         "shutting down",
         ERR_TRANSIENT},
        {"connection to server at \"h\", port 5432 failed: FATAL:  sorry, too many clients "
         "already",
         ERR_TRANSIENT},
        {"connection to server at \"h\", port 5432 failed: FATAL:  remaining connection slots "
         "are reserved for non-replication superuser connections",
         ERR_TRANSIENT},
        {"server closed the connection unexpectedly", ERR_TRANSIENT},
        {"connection to server at \"h\", port 5432 failed: FATAL:  password authentication "
         "failed for user \"steward\"",
         ERR_INVALID},
        {"connection to server at \"h\", port 5432 failed: FATAL:  no pg_hba.conf entry for "
         "host \"10.0.0.2\", user \"steward\", database \"steward\", no encryption",
         ERR_INVALID},
        {"connection to server at \"h\", port 5432 failed: FATAL:  database \"nope\" does not "
         "exist",
         ERR_INVALID},
        {"connection to server at \"h\", port 5432 failed: FATAL:  role \"nope\" does not exist",
         ERR_INVALID},
        {"connection to server at \"h\", port 5432 failed: FATAL:  role \"r\" is not permitted "
         "to log in",
         ERR_INVALID},
        {"invalid sslmode value: \"sometimes\"", ERR_INVALID},
        {"invalid integer value \"x\" for connection option \"port\"", ERR_INVALID},
        {"could not match 2 port numbers to 3 hosts", ERR_INVALID},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(db_connect_class(0, cases[i].message) == cases[i].cls, "%s: %s",
                      cases[i].message, err_class_name(db_connect_class(0, cases[i].message)));
    ck_assert_int_eq(db_connect_class(1, "fe_sendauth: no password supplied"), ERR_INVALID);
    ck_assert_int_eq(db_connect_class(0, NULL), ERR_TRANSIENT);
}
END_TEST

START_TEST(bad_option_values_are_refused_without_a_retry)
{
    /* libpq refuses these itself, before any network: a config error. */
    char errstr[512];
    err_class_t cls;
    PGconn *c = db_connect_classified("host=127.0.0.1 port=1 sslmode=sometimes", "test", &cls,
                                      errstr, sizeof errstr);
    ck_assert_ptr_null(c);
    ck_assert_msg(cls == ERR_INVALID, "%s: %s", err_class_name(cls), errstr);
    c = db_connect_classified("host=127.0.0.1 port=1 connect_timeout=2", "test", &cls, errstr,
                              sizeof errstr);
    ck_assert_ptr_null(c);
    ck_assert_msg(cls == ERR_TRANSIENT, "%s: %s", err_class_name(cls), errstr);
    ck_assert_msg(strstr(errstr, "refused") != NULL, "%s", errstr);
}
END_TEST

Suite *db_suite(void)
{
    Suite *s = suite_create("db");
    TCase *tc = tcase_create("db");
    tcase_add_test(tc, unparseable_passwords_are_not_echoed);
    tcase_add_test(tc, parsed_passwords_are_replaced_wherever_they_appear);
    tcase_add_test(tc, connection_failures_are_classified);
    tcase_add_test(tc, bad_option_values_are_refused_without_a_retry);
    suite_add_tcase(s, tc);
    return s;
}
