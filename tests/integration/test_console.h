/*
 * test_console - what the console suite's two files share (test_console.c:
 * the API behind the console and the views without a broker;
 * test_console_browser.c: the pages in headless Chromium): the world
 * they run in and the requests they make.
 */
#ifndef STEWARD_TEST_CONSOLE_H
#define STEWARD_TEST_CONSOLE_H

#include "testlib.h"
#include "world.h"

#include <check.h>
#include <jansson.h>

/* The world of the suite's tests; tc_world_start() fills it, the
 * fixture's teardown ends it. */
extern tw_world_t tc_world;

/* The operate token the world's tokens file holds; its name is "alice". */
#define OPS_SECRET "console-opsecret-1111"

/* Starts steward on a fresh database with the alerting definition and
 * three orders: o-1 completed, o-2 paid (awaiting dispatch, its deadline
 * an hour away), o-3 never paid (3 s), so overdue with an alert open. */
void tc_world_start(void);

/* Waits until sql answers expected, for up to timeout_s. */
void tc_wait_sql(const char *sql, const char *expected, int timeout_s, const char *what);

/* Produces event `type` for order `key` to topic `name`. */
void tc_send_event(tl_producer_t *p, const char *name, const char *type, const char *key);

/* GETs path, asserting the status; the body parsed as JSON. */
json_t *tc_get_json(const char *path, long expected);

/* The integer `field` of doc, asserted to be one. */
long long tc_num(json_t *doc, const char *field);

/* Adds the browser tests (test_console_browser.c) to tc. */
void tc_add_browser_tests(TCase *tc);

#endif
