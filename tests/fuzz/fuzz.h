/*
 * fuzz - what the libFuzzer targets of this directory share: a check that
 * aborts (so libFuzzer records the input as a crash) when an invariant the
 * product promises is broken, and a NUL-terminated copy of the input.
 *
 * Each target is one file, fuzz_<name>.c, with LLVMFuzzerTestOneInput() and
 * no state kept between inputs (a fixed definition or table built once is
 * read-only). Targets never touch the network, PostgreSQL or Kafka: they
 * stop where the input has been decoded and checked.
 */
#ifndef STEWARD_FUZZ_H
#define STEWARD_FUZZ_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#define FUZZ_CHECK(cond, ...)                                                                      \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "invariant broken (%s:%d): %s: ", __FILE__, __LINE__, #cond);          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A copy of data with a NUL after it (free it); an embedded NUL ends the
 * string, as it would for the C API the bytes are fed to. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        abort();
    if (size > 0)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

#endif
