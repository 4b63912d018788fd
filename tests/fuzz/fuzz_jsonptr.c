/*
 * fuzz_jsonptr - JSON pointers (definitions' key, type, id, time and
 * capture pointers) against a JSON document. The input is a pointer, a
 * newline, then the document. A pointer jsonptr_valid() accepts may name
 * nothing, but one it refuses names nothing either; escaping a token with
 * jsonptr_append() and looking it up in an object holding that key finds
 * it, and a token too long for the buffer is cut between characters and
 * escapes, never inside one.
 */
#include "common/utf8.h"
#include "definitions/jsonptr.h"
#include "formats/decode.h"
#include "fuzz.h"

#include <jansson.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t ptr_len = nl != NULL ? (size_t) (nl - data) : size;
    char *ptr = fuzz_cstr(data, ptr_len);
    char errstr[256];
    json_error_t jerr;
    json_t *doc = NULL;

    if (nl != NULL)
        doc = json_loadb((const char *) nl + 1, size - ptr_len - 1,
                         JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
    if (doc == NULL)
        doc = json_pack("{s:{s:[i,s]},s:s,s:s}", "a", "b", 1, "c", "~/", "x", "m/n", "y", "");

    bool valid = jsonptr_valid(ptr, errstr, sizeof errstr);
    json_t *found = jsonptr_get(doc, ptr);
    if (!valid)
        FUZZ_CHECK(found == NULL, "invalid pointer '%s' (%s) named something", ptr, errstr);
    if (strcmp(ptr, "") == 0)
        FUZZ_CHECK(found == doc, "the empty pointer is not the whole document");

    /* The input's first line as one token: append, then look it up. */
    if (utf8_valid((const unsigned char *) ptr, strlen(ptr))) { /* as jansson keys */
        size_t escaped_len = 1 + strlen(ptr);                   /* the '/' and the token */
        for (const char *p = ptr; *p != '\0'; p++)
            escaped_len += *p == '~' || *p == '/';

        char buf[4096] = "";
        jsonptr_append(buf, sizeof buf, ptr);
        FUZZ_CHECK(jsonptr_valid(buf, errstr, sizeof errstr), "'%s' escaped is '%s': %s", ptr, buf,
                   errstr);
        FUZZ_CHECK(utf8_valid((const unsigned char *) buf, strlen(buf)),
                   "'%s' escaped is '%s', which cuts a character", ptr, buf);
        if (escaped_len < sizeof buf) {
            FUZZ_CHECK(strlen(buf) == escaped_len, "'%s' escaped is '%s', %zu bytes, not %zu", ptr,
                       buf, strlen(buf), escaped_len);
            json_t *obj = json_object();
            json_t *leaf = json_true();
            json_object_set_new(obj, ptr, leaf);
            FUZZ_CHECK(jsonptr_get(obj, buf) == leaf, "token '%s' escaped as '%s' not found", ptr,
                       buf);
            json_decref(obj);
        } else {
            FUZZ_CHECK(strlen(buf) < escaped_len, "'%s' did not fit but gave '%s'", ptr, buf);
        }

        char small[8] = "";
        jsonptr_append(small, sizeof small, ptr); /* truncates */
        FUZZ_CHECK(jsonptr_valid(small, errstr, sizeof errstr) &&
                       utf8_valid((const unsigned char *) small, strlen(small)),
                   "'%s' truncated is '%s', half an escape or character", ptr, small);
    }
    json_decref(doc);
    free(ptr);
    return 0;
}
