/*
 * fuzz_sink_response - what a sink (PagerDuty, a webhook, Alertmanager)
 * answers, through the libcurl callbacks the notifier gives its transfers:
 * header lines (Retry-After) and the body, of which the start becomes the
 * error recorded in steward.outbox.last_error, a text column.
 *
 * The input is 2 bytes of status, 1 byte saying where to split the body
 * into two writes, then header lines up to an empty line ("\r\n\r\n"),
 * then the body. The Retry-After kept is -1 or within the cap; the error
 * text is valid UTF-8 (PostgreSQL refuses anything else, and with it the
 * record of the attempt) and no longer than NOTIFIER_ERROR_SIZE.
 */
#include "common/utf8.h"
#include "formats/decode.h"
#include "manager/alerting/notifier.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    long status = 100 + (data[0] << 8 | data[1]) % 500;
    unsigned split = data[2];
    data += 3;
    size -= 3;

    notifier_response_t r;
    notifier_response_init(&r, NOTIFIER_MAX_RETRY_AFTER_MS);

    /* Headers: one callback per line, CRLF included, as libcurl calls it. */
    size_t i = 0;
    while (i < size) {
        const uint8_t *lf = memchr(data + i, '\n', size - i);
        size_t n = lf != NULL ? (size_t) (lf - (data + i)) + 1 : size - i;
        char *line = malloc(n);
        if (line == NULL)
            abort();
        memcpy(line, data + i, n);
        size_t taken = notifier_response_header(line, 1, n, &r);
        FUZZ_CHECK(taken == n, "header callback took %zu of %zu bytes", taken, n);
        free(line);
        i += n;
        if (n <= 2 && (n == 1 || data[i - 2] == '\r'))
            break; /* the empty line: the body follows */
    }
    FUZZ_CHECK(r.retry_after_ms >= -1 && r.retry_after_ms <= NOTIFIER_MAX_RETRY_AFTER_MS,
               "Retry-After wait %lld", (long long) r.retry_after_ms);

    /* The body, in two writes (libcurl splits it where the network did). */
    size_t body_len = size - i;
    size_t first = body_len > 0 ? split % (body_len + 1) : 0;
    char *body = malloc(body_len + 1);
    if (body == NULL)
        abort();
    if (body_len > 0)
        memcpy(body, data + i, body_len);
    FUZZ_CHECK(notifier_response_body(body, 1, first, &r) == first, "first write not taken");
    FUZZ_CHECK(notifier_response_body(body + first, 1, body_len - first, &r) == body_len - first,
               "second write not taken");
    FUZZ_CHECK(r.len <= NOTIFIER_RESPONSE_KEEP && r.body[r.len] == '\0', "kept %zu bytes", r.len);

    char error[NOTIFIER_ERROR_SIZE];
    notifier_response_error(status, &r, error, sizeof error);
    FUZZ_CHECK(utf8_valid((const unsigned char *) error, strlen(error)),
               "the error recorded for a %ld answer is not UTF-8 (%zu bytes)", status,
               strlen(error));
    free(body);
    return 0;
}
