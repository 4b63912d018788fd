/*
 * utf8 - the one UTF-8 validator (what decode accepts from Kafka, what the
 * store may write as text) and cutting text to a byte limit without
 * splitting a character, for
 * sink fields with a size limit (PagerDuty's 1,024-byte summary): a cut
 * through a multibyte sequence makes invalid UTF-8, which a sink refuses
 * for good. Pure.
 */
#ifndef STEWARD_UTF8_H
#define STEWARD_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/*
 * The length of the longest prefix of the NUL-terminated `text` that is at
 * most max_bytes long and ends on a character boundary (never inside a
 * sequence that starts with a lead byte). Bytes that are not valid UTF-8
 * count as one character each.
 */
size_t utf8_prefix_len(const char *text, size_t max_bytes);

/*
 * Copies text into buf (buf_size > 0) cut as utf8_prefix_len() says so that
 * the copy plus `ellipsis` (may be NULL or "") fits in max_bytes; the
 * ellipsis is appended only when something was cut. max_bytes must be
 * below buf_size. Returns buf.
 */
char *utf8_cut(const char *text, size_t max_bytes, const char *ellipsis, char *buf,
               size_t buf_size);

/*
 * The length of text without a multibyte sequence cut short at its end
 * (what snprintf() into a fixed buffer can leave): the text's length when
 * its last character is whole.
 */
size_t utf8_whole_len(const char *text);

/* True if buf[0..len) is well-formed UTF-8 (no overlongs, no surrogates,
 * nothing above U+10FFFF, no sequence cut short). */
bool utf8_valid(const unsigned char *buf, size_t len);

/*
 * Removes in place every byte of text that is not part of a well-formed
 * UTF-8 sequence (RFC 3629: no overlong forms, surrogates or code points
 * past U+10FFFF), such as a character that a "%.60s" or a full buffer cut
 * in two. What is left PostgreSQL takes as text. Returns the new length.
 */
size_t utf8_scrub(char *text);

#endif
