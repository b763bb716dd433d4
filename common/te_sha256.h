/* SPDX-License-Identifier: Apache-2.0
 * te_sha256.h -- SHA-256 (FIPS 180-4), HMAC-SHA256 (RFC 2104) and a
 * constant-time comparison: what libtecomm's membership proof needs
 * (libtecomm/boot/auth.c), with no crypto library to load.  Plain C, no
 * allocation; compiled into libtecomm (and the tests and fuzz-parse that
 * check it against the FIPS 180-4 and RFC 4231 vectors). */
#ifndef TE_SHA256_H
#define TE_SHA256_H

#include <stddef.h>
#include <stdint.h>

#define TE_SHA256_BYTES 32
#define TE_SHA256_BLOCK 64

struct te_sha256 {
  uint32_t h[8];
  uint64_t bytes;                /* hashed so far */
  unsigned char buf[TE_SHA256_BLOCK];
  size_t nbuf;
};

void te_sha256_init(struct te_sha256 *s);
void te_sha256_update(struct te_sha256 *s, const void *p, size_t n);
void te_sha256_final(struct te_sha256 *s, unsigned char out[TE_SHA256_BYTES]);
void te_sha256(const void *p, size_t n, unsigned char out[TE_SHA256_BYTES]);

/* HMAC-SHA256 over the concatenation of parts (n of them: msg[i], len[i]),
 * so callers need not build one buffer of a message's fields. */
struct te_hmac {
  struct te_sha256 inner;
  unsigned char okey[TE_SHA256_BLOCK];
};
void te_hmac_init(struct te_hmac *h, const void *key, size_t keylen);
void te_hmac_update(struct te_hmac *h, const void *p, size_t n);
void te_hmac_final(struct te_hmac *h, unsigned char out[TE_SHA256_BYTES]);
void te_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t n,
                    unsigned char out[TE_SHA256_BYTES]);

/* 1 when a and b (n bytes) are equal; the time taken does not depend on
 * where they differ. */
int te_ct_equal(const void *a, const void *b, size_t n);
/* Overwrites n bytes at p in a way the compiler does not drop. */
void te_wipe(void *p, size_t n);

#endif
