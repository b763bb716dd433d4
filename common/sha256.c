/* SPDX-License-Identifier: Apache-2.0
 * sha256.c -- SHA-256 as FIPS 180-4 section 6.2 states it, HMAC (RFC
 * 2104) on top, a constant-time comparison and a wipe (te_sha256.h).
 * Written for clarity over speed: it hashes a few hundred bytes per
 * connection while a communicator starts, never on a collective's path. */
#include "te_sha256.h"
#include <string.h>

static const uint32_t K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

static uint32_t ror(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static void block(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++)
    w[t] = (uint32_t)p[4 * t] << 24 | (uint32_t)p[4 * t + 1] << 16 | (uint32_t)p[4 * t + 2] << 8 |
           p[4 * t + 3];
  for (int t = 16; t < 64; t++) {
    uint32_t s0 = ror(w[t - 15], 7) ^ ror(w[t - 15], 18) ^ (w[t - 15] >> 3);
    uint32_t s1 = ror(w[t - 2], 17) ^ ror(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int t = 0; t < 64; t++) {
    uint32_t t1 = k + (ror(e, 6) ^ ror(e, 11) ^ ror(e, 25)) + ((e & f) ^ (~e & g)) + K[t] + w[t];
    uint32_t t2 = (ror(a, 2) ^ ror(a, 13) ^ ror(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

void te_sha256_init(struct te_sha256 *s) {
  static const uint32_t iv[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  memcpy(s->h, iv, sizeof iv);
  s->bytes = 0;
  s->nbuf = 0;
}

void te_sha256_update(struct te_sha256 *s, const void *p, size_t n) {
  const unsigned char *b = p;
  s->bytes += n;
  while (n > 0) {
    size_t k = TE_SHA256_BLOCK - s->nbuf;
    if (k > n) k = n;
    memcpy(s->buf + s->nbuf, b, k);
    s->nbuf += k;
    b += k;
    n -= k;
    if (s->nbuf == TE_SHA256_BLOCK) {
      block(s->h, s->buf);
      s->nbuf = 0;
    }
  }
}

void te_sha256_final(struct te_sha256 *s, unsigned char out[TE_SHA256_BYTES]) {
  uint64_t bits = s->bytes * 8;
  unsigned char pad[TE_SHA256_BLOCK + 8] = {0x80};
  size_t padn = (s->nbuf < 56 ? 56 : 120) - s->nbuf;
  for (int i = 0; i < 8; i++) pad[padn + (size_t)i] = (unsigned char)(bits >> (56 - 8 * i));
  te_sha256_update(s, pad, padn + 8);
  for (int i = 0; i < 8; i++) {
    out[4 * i] = (unsigned char)(s->h[i] >> 24);
    out[4 * i + 1] = (unsigned char)(s->h[i] >> 16);
    out[4 * i + 2] = (unsigned char)(s->h[i] >> 8);
    out[4 * i + 3] = (unsigned char)s->h[i];
  }
  te_wipe(s, sizeof *s);
}

void te_sha256(const void *p, size_t n, unsigned char out[TE_SHA256_BYTES]) {
  struct te_sha256 s;
  te_sha256_init(&s);
  te_sha256_update(&s, p, n);
  te_sha256_final(&s, out);
}

void te_hmac_init(struct te_hmac *h, const void *key, size_t keylen) {
  unsigned char k[TE_SHA256_BLOCK] = {0}, ikey[TE_SHA256_BLOCK];
  if (keylen > TE_SHA256_BLOCK) te_sha256(key, keylen, k); /* long keys are hashed first */
  else if (keylen) memcpy(k, key, keylen);
  for (int i = 0; i < TE_SHA256_BLOCK; i++) {
    ikey[i] = k[i] ^ 0x36;
    h->okey[i] = k[i] ^ 0x5c;
  }
  te_sha256_init(&h->inner);
  te_sha256_update(&h->inner, ikey, sizeof ikey);
  te_wipe(k, sizeof k);
  te_wipe(ikey, sizeof ikey);
}

void te_hmac_update(struct te_hmac *h, const void *p, size_t n) { te_sha256_update(&h->inner, p, n); }

void te_hmac_final(struct te_hmac *h, unsigned char out[TE_SHA256_BYTES]) {
  unsigned char in[TE_SHA256_BYTES];
  te_sha256_final(&h->inner, in);
  struct te_sha256 o;
  te_sha256_init(&o);
  te_sha256_update(&o, h->okey, sizeof h->okey);
  te_sha256_update(&o, in, sizeof in);
  te_sha256_final(&o, out);
  te_wipe(in, sizeof in);
  te_wipe(h, sizeof *h);
}

void te_hmac_sha256(const void *key, size_t keylen, const void *msg, size_t n,
                    unsigned char out[TE_SHA256_BYTES]) {
  struct te_hmac h;
  te_hmac_init(&h, key, keylen);
  te_hmac_update(&h, msg, n);
  te_hmac_final(&h, out);
}

int te_ct_equal(const void *a, const void *b, size_t n) {
  const volatile unsigned char *x = a, *y = b;
  unsigned char d = 0;
  for (size_t i = 0; i < n; i++) d |= (unsigned char)(x[i] ^ y[i]);
  return d == 0;
}

void te_wipe(void *p, size_t n) {
  volatile unsigned char *v = p;
  while (n--) *v++ = 0;
}
