/*
 * rejections - steward.rejected summed for a person; see rejections.h.
 */
#include "shadow/rejections.h"

#include "common/db.h"

#include <stdlib.h>

err_class_t rejections_read(PGconn *conn, int64_t since_wall_ms, json_t **out, char *errstr,
                            size_t errstr_size)
{
    err_class_t cls = ERR_OK;
    char since[32];
    snprintf(since, sizeof since, "%lld", (long long) since_wall_ms);
    const char *params[1] = {since};
    *out = NULL;
    PGresult *res = db_query(conn, "reading the rejected messages",
                             "SELECT topic, reason, count(*), (array_agg(detail ORDER BY id))[1] "
                             "FROM steward.rejected "
                             "WHERE $1::bigint = 0 OR recorded_at >= steward.from_ms($1::bigint) "
                             "GROUP BY topic, reason ORDER BY 3 DESC, 1, 2",
                             1, params, &cls, errstr, errstr_size);
    if (res == NULL)
        return cls;
    json_t *by_reason = json_object(), *by_topic = json_array();
    long long total = 0;
    for (int i = 0; by_reason != NULL && by_topic != NULL && i < PQntuples(res); i++) {
        const char *reason = PQgetvalue(res, i, 1);
        long long n = atoll(PQgetvalue(res, i, 2));
        total += n;
        json_t *sum = json_object_get(by_reason, reason);
        json_object_set_new(by_reason, reason,
                            json_integer((sum != NULL ? json_integer_value(sum) : 0) + n));
        json_array_append_new(by_topic,
                              json_pack("{s:s, s:s, s:I, s:s?}", "topic", PQgetvalue(res, i, 0),
                                        "reason", reason, "count", (json_int_t) n, "sample",
                                        PQgetisnull(res, i, 3) ? NULL : PQgetvalue(res, i, 3)));
    }
    PQclear(res);
    if (by_reason == NULL || by_topic == NULL) {
        json_decref(by_reason);
        json_decref(by_topic);
        return err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
    }
    *out = json_pack("{s:I, s:o, s:o}", "total", (json_int_t) total, "by_reason", by_reason,
                     "by_topic", by_topic);
    return *out != NULL ? ERR_OK : err_set(ERR_FATAL, errstr, errstr_size, "out of memory");
}

void rejections_print(const json_t *rejected, FILE *out)
{
    const json_t *by_reason = json_object_get(rejected, "by_reason");
    fprintf(out, "messages rejected: %lld",
            (long long) json_integer_value(json_object_get(rejected, "total")));
    const char *reason, *sep = " (";
    json_t *n;
    json_object_foreach((json_t *) by_reason, reason, n)
    {
        fprintf(out, "%s%s %lld", sep, reason, (long long) json_integer_value(n));
        sep = ", ";
    }
    fprintf(out, "%s\n", json_object_size(by_reason) > 0 ? ")" : "");
    size_t i;
    json_t *row;
    json_array_foreach(json_object_get(rejected, "by_topic"), i, row)
    {
        fprintf(out, "  %-28s %-20s %8lld  e.g. %s\n",
                json_string_value(json_object_get(row, "topic")),
                json_string_value(json_object_get(row, "reason")),
                (long long) json_integer_value(json_object_get(row, "count")),
                json_is_string(json_object_get(row, "sample"))
                    ? json_string_value(json_object_get(row, "sample"))
                    : "");
    }
}
