/*
 * sha256 - SHA-256 (FIPS 180-4) of a byte string, for names that must stay
 * short and still tell any two inputs apart (alert dedup keys). Pure and
 * reentrant: no state outside the caller's buffers.
 */
#ifndef STEWARD_SHA256_H
#define STEWARD_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_HEX_SIZE 65 /* 64 hex digits and the NUL */

/* The digest of data[0..len) as 32 bytes in out. */
void sha256(const void *data, size_t len, uint8_t out[32]);

/* The digest as 64 lowercase hex digits and a NUL in hex. */
void sha256_hex(const void *data, size_t len, char hex[SHA256_HEX_SIZE]);

#endif
