/*
 * utf8 - validation and character-boundary cuts; see utf8.h.
 */
#include "common/utf8.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* How many bytes the sequence at p takes (1 for anything invalid). */
static size_t seq_len(const unsigned char *p, size_t avail)
{
    size_t n = p[0] < 0x80             ? 1
               : (p[0] & 0xE0) == 0xC0 ? 2
               : (p[0] & 0xF0) == 0xE0 ? 3
               : (p[0] & 0xF8) == 0xF0 ? 4
                                       : 1;
    if (n > avail)
        return 1;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 1;
    }
    return n;
}

size_t utf8_prefix_len(const char *text, size_t max_bytes)
{
    const unsigned char *p = (const unsigned char *) text;
    size_t len = strlen(text), at = 0;
    while (at < len) {
        size_t n = seq_len(p + at, len - at);
        if (at + n > max_bytes)
            break;
        at += n;
    }
    return at;
}

char *utf8_cut(const char *text, size_t max_bytes, const char *ellipsis, char *buf, size_t buf_size)
{
    size_t len = strlen(text), tail = ellipsis != NULL ? strlen(ellipsis) : 0;
    if (max_bytes >= buf_size)
        max_bytes = buf_size - 1;
    bool cut = len > max_bytes;
    size_t keep = utf8_prefix_len(text, cut && tail < max_bytes ? max_bytes - tail : max_bytes);
    memcpy(buf, text, keep);
    if (cut && tail < max_bytes) {
        memcpy(buf + keep, ellipsis, tail);
        keep += tail;
    }
    buf[keep] = '\0';
    return buf;
}

size_t utf8_whole_len(const char *text)
{
    const unsigned char *p = (const unsigned char *) text;
    size_t len = strlen(text), back = 0;
    /* Up to three continuation bytes, then the lead byte they belong to. */
    while (back < 3 && back < len && (p[len - 1 - back] & 0xC0) == 0x80)
        back++;
    if (back == len)
        return len;
    unsigned char lead = p[len - 1 - back];
    size_t need = (lead & 0xE0) == 0xC0   ? 2
                  : (lead & 0xF0) == 0xE0 ? 3
                  : (lead & 0xF8) == 0xF0 ? 4
                                          : 1;
    return need > back + 1 ? len - 1 - back : len;
}

bool utf8_valid(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        size_t need;
        uint32_t cp, min;

        if (c < 0x80) {
            i++;
            continue;
        } else if ((c & 0xE0) == 0xC0) {
            need = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            need = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            need = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return false;
        }
        if (i + need >= len)
            return false; /* truncated sequence */
        for (size_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += need + 1;
    }
    return true;
}

/* The length of the well-formed sequence at p, 0 when there is none. */
static size_t valid_len(const unsigned char *p, size_t avail)
{
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000}; /* no overlong forms */
    size_t n = seq_len(p, avail);
    if (n == 1)
        return p[0] < 0x80 ? 1 : 0;
    uint32_t cp = p[0] & (0x7Fu >> n);
    for (size_t i = 1; i < n; i++)
        cp = (cp << 6) | (p[i] & 0x3Fu);
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

size_t utf8_scrub(char *text)
{
    unsigned char *p = (unsigned char *) text;
    size_t len = strlen(text), o = 0;
    for (size_t i = 0; i < len;) {
        size_t n = valid_len(p + i, len - i);
        if (n == 0) {
            i++;
            continue;
        }
        memmove(p + o, p + i, n);
        o += n;
        i += n;
    }
    p[o] = '\0';
    return o;
}
