/* SPDX-License-Identifier: Apache-2.0 */
/* wire.c -- the header and handshake messages of libtecomm's host
 * exchanges: encoding, and parsers that trust nothing they are given
 * (wire.h).  No sockets and no library state here: fuzz-parse links this
 * file alone. */
#include "wire.h"
#include "te_sha256.h"
#include <stdio.h>
#include <string.h>

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static void put16(unsigned char *p, uint16_t v) {
  p[0] = (unsigned char)v;
  p[1] = (unsigned char)(v >> 8);
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }

void tc_wire_put_hdr(unsigned char *out, uint16_t type, uint32_t length, uint32_t seq) {
  put32(out, TC_WIRE_MAGIC);
  put16(out + 4, TC_WIRE_VERSION);
  put16(out + 6, type);
  put32(out + 8, length);
  put32(out + 12, seq);
}

int tc_wire_get_hdr(const unsigned char *p, size_t len, struct tc_wire_hdr *h, char *why,
                    size_t wl) {
  if (!p || len < TC_WIRE_HDR) {
    snprintf(why, wl, "a message of %zu bytes is shorter than its %d-byte header", len,
             TC_WIRE_HDR);
    return -1;
  }
  h->magic = get32(p);
  h->version = get16(p + 4);
  h->type = get16(p + 6);
  h->length = get32(p + 8);
  h->seq = get32(p + 12);
  if (h->magic != TC_WIRE_MAGIC) {
    snprintf(why, wl, "not a libtecomm message (magic 0x%08x)", (unsigned)h->magic);
    return -1;
  }
  if (h->version != TC_WIRE_VERSION) {
    snprintf(why, wl, "protocol version %u (this library speaks %d)", (unsigned)h->version,
             TC_WIRE_VERSION);
    return -1;
  }
  if (h->type < TC_WIRE_HELLO || h->type > TC_WIRE_FD) {
    snprintf(why, wl, "unknown message type %u", (unsigned)h->type);
    return -1;
  }
  if (h->length > TC_WIRE_MAX_BODY) {
    snprintf(why, wl, "a message body of %u bytes (at most %u)", (unsigned)h->length,
             (unsigned)TC_WIRE_MAX_BODY);
    return -1;
  }
  return 0;
}

int tc_wire_expect(const struct tc_wire_hdr *h, uint16_t type, uint32_t length, uint32_t seq,
                   char *why, size_t wl) {
  if (h->type != type) {
    snprintf(why, wl, "a message of type %u where type %u was due", (unsigned)h->type,
             (unsigned)type);
    return -1;
  }
  if (h->length != length) {
    snprintf(why, wl, "a message of %u bytes where %u were due", (unsigned)h->length,
             (unsigned)length);
    return -1;
  }
  if (h->seq != seq) {
    snprintf(why, wl, "message number %u where %u was due (out of step, or replayed)",
             (unsigned)h->seq, (unsigned)seq);
    return -1;
  }
  return 0;
}

void tc_wire_mac(const struct tc_wire_key *k, int kind, const unsigned char *nonce_l,
                 const unsigned char *nonce_c, uint32_t rank, uint32_t nranks,
                 unsigned char mac[TC_WIRE_MAC]) {
  static const char proof[] = "tecomm-proof", accept[] = "tecomm-accept";
  unsigned char rn[8];
  put32(rn, rank);
  put32(rn + 4, nranks);
  struct te_hmac h;
  te_hmac_init(&h, k->key, sizeof k->key);
  if (kind == TC_WIRE_PROOF) te_hmac_update(&h, proof, sizeof proof);
  else te_hmac_update(&h, accept, sizeof accept);
  te_hmac_update(&h, k->ctx, sizeof k->ctx);
  te_hmac_update(&h, nonce_l, TC_WIRE_NONCE);
  te_hmac_update(&h, nonce_c, TC_WIRE_NONCE);
  te_hmac_update(&h, rn, sizeof rn);
  te_hmac_final(&h, mac);
}

void tc_wire_put_proof(unsigned char *out, const struct tc_wire_proof *pr) {
  tc_wire_put_hdr(out, TC_WIRE_PROOF, TC_WIRE_PROOF_BODY, 0);
  unsigned char *b = out + TC_WIRE_HDR;
  put32(b, pr->rank);
  put32(b + 4, pr->nranks);
  memcpy(b + 8, pr->nonce, TC_WIRE_NONCE);
  memcpy(b + 8 + TC_WIRE_NONCE, pr->mac, TC_WIRE_MAC);
}

/* The header of a handshake message of len bytes: type and body size. */
static int hs_hdr(const unsigned char *msg, size_t len, uint16_t type, uint32_t body, char *why,
                  size_t wl) {
  struct tc_wire_hdr h;
  if (tc_wire_get_hdr(msg, len, &h, why, wl) != 0) return -1;
  if (tc_wire_expect(&h, type, body, 0, why, wl) != 0) return -1;
  if (len != TC_WIRE_HDR + (size_t)body) {
    snprintf(why, wl, "%zu bytes of a %u-byte message", len, (unsigned)(TC_WIRE_HDR + body));
    return -1;
  }
  return 0;
}

int tc_wire_check_proof(const struct tc_wire_key *k, const unsigned char *nonce_l,
                        const unsigned char *msg, size_t len, const struct tc_wire_ranks *rk,
                        struct tc_wire_proof *pr, char *why, size_t wl) {
  const uint32_t nranks = rk->nranks, lo = rk->lo, hi = rk->hi;
  if (hs_hdr(msg, len, TC_WIRE_PROOF, TC_WIRE_PROOF_BODY, why, wl) != 0) return -1;
  const unsigned char *b = msg + TC_WIRE_HDR;
  struct tc_wire_proof p;
  p.rank = get32(b);
  p.nranks = get32(b + 4);
  memcpy(p.nonce, b + 8, TC_WIRE_NONCE);
  memcpy(p.mac, b + 8 + TC_WIRE_NONCE, TC_WIRE_MAC);
  unsigned char want[TC_WIRE_MAC];
  tc_wire_mac(k, TC_WIRE_PROOF, nonce_l, p.nonce, p.rank, p.nranks, want);
  int good = te_ct_equal(want, p.mac, TC_WIRE_MAC);
  te_wipe(want, sizeof want);
  /* the MAC first: a stranger learns nothing of the ranks from the answer */
  if (!good) {
    snprintf(why, wl, "its proof does not answer this challenge with the communicator's secret");
    return -1;
  }
  if (p.nranks != nranks) {
    snprintf(why, wl, "it proves membership of a %u-rank job (this one has %u)",
             (unsigned)p.nranks, (unsigned)nranks);
    return -1;
  }
  if (p.rank < lo || p.rank >= hi) {
    snprintf(why, wl, "it says rank %u, not one of [%u, %u) that connect here", (unsigned)p.rank,
             (unsigned)lo, (unsigned)hi);
    return -1;
  }
  *pr = p;
  return 0;
}

int tc_wire_check_hello(const unsigned char *msg, size_t len, unsigned char *nonce_l, char *why,
                        size_t wl) {
  if (hs_hdr(msg, len, TC_WIRE_HELLO, TC_WIRE_HELLO_BODY, why, wl) != 0) return -1;
  memcpy(nonce_l, msg + TC_WIRE_HDR, TC_WIRE_NONCE);
  return 0;
}

int tc_wire_check_accept(const struct tc_wire_key *k, const unsigned char *msg, size_t len,
                         const unsigned char *nonce_l, const struct tc_wire_proof *pr, char *why,
                         size_t wl) {
  if (hs_hdr(msg, len, TC_WIRE_ACCEPT, TC_WIRE_ACCEPT_BODY, why, wl) != 0) return -1;
  unsigned char want[TC_WIRE_MAC];
  tc_wire_mac(k, TC_WIRE_ACCEPT, nonce_l, pr->nonce, pr->rank, pr->nranks, want);
  int good = te_ct_equal(want, msg + TC_WIRE_HDR, TC_WIRE_MAC);
  te_wipe(want, sizeof want);
  if (!good) {
    snprintf(why, wl, "the listener's answer is not made with this communicator's secret");
    return -1;
  }
  return 0;
}

int tc_wire_str_ok(const char *s, size_t cap) { return s && memchr(s, '\0', cap) != NULL; }
