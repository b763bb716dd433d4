/* SPDX-License-Identifier: Apache-2.0
 *
 * rng.h -- the seeded PRNG the tests and the fuzzers share: xoshiro256**
 * seeded through splitmix64, one state per program (te_rng_seed).  Plain
 * C with no test framework, so t/fuzz's drivers use it without Check. */
#ifndef TE_T_RNG_H
#define TE_T_RNG_H

#include <stdint.h>

#define TE_RNG_UNUSED __attribute__((unused))

static uint64_t te_rng_s[4];

static TE_RNG_UNUSED uint64_t te_splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static TE_RNG_UNUSED void te_rng_seed(uint64_t seed) {
  uint64_t x = seed;
  for (int i = 0; i < 4; i++) te_rng_s[i] = te_splitmix64(&x);
}

static TE_RNG_UNUSED uint64_t te_rand_u64(void) {
  uint64_t *s = te_rng_s;
  uint64_t r = s[1] * 5;
  r = ((r << 7) | (r >> 57)) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = (s[3] << 45) | (s[3] >> 19);
  return r;
}

#endif
