/*
 * secret - the one reader of secrets kept in files (a `*_file` config
 * value, a sink's routing key or token, the HTTP tokens file): whole or
 * refused, so a value cut at a buffer's end can never pass for the secret.
 */
#ifndef STEWARD_SECRET_H
#define STEWARD_SECRET_H

#include <stddef.h>

#define SECRET_MAX_BYTES (1024 * 1024)

/*
 * Reads a secret from a file: its whole contents without the trailing
 * newline, as a new string (free it). NULL with the reason in errstr when
 * unreadable, larger than SECRET_MAX_BYTES, or not text (a NUL byte).
 */
char *secret_read_file(const char *path, char *errstr, size_t errstr_size);

#endif
