/* SPDX-License-Identifier: Apache-2.0 */
/* wire.h -- the bytes libtecomm's ranks send each other while a
 * communicator starts (the TCP rendezvous, the local mesh, and what rides
 * on them: capabilities, the verbs cards), and their parsers.
 *
 * Every message is a 16-byte header, then length bytes of body:
 *   magic   u32  TC_WIRE_MAGIC
 *   version u16  TC_WIRE_VERSION
 *   type    u16  enum tc_wire_type
 *   length  u32  bytes of body (at most TC_WIRE_MAX_BODY)
 *   seq     u32  the exchange's number on this connection (both ends
 *                count their collective exchanges the same way)
 * all little-endian.  A message whose header is not exactly the one the
 * receiver expects (type, length, seq) is refused before its body is
 * used.  The parsers here are plain functions of bytes (no sockets, no
 * state), so fuzz-parse drives them directly (t/fuzz/fuzz_parse_one.c).
 *
 * The handshake (auth.c) that opens every connection:
 *   HELLO  listener -> connector: nonce_l[32]
 *   PROOF  connector -> listener: rank u32, nranks u32, nonce_c[32],
 *          mac_c[32] = HMAC(key, "tecomm-proof" ctx nonce_l nonce_c rank nranks)
 *   ACCEPT listener -> connector: mac_l[32] = HMAC(key, "tecomm-accept" ctx
 *          nonce_l nonce_c rank nranks)
 * Both nonces are fresh, so a proof recorded once is worth nothing later;
 * the listener's answer proves to the connector that it, too, has the
 * key (nobody else can sit on a rank's address and collect the data). */
#ifndef TECOMM_WIRE_H
#define TECOMM_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define TC_WIRE_MAGIC 0x6d636574u /* "tecm" as little-endian bytes */
#define TC_WIRE_VERSION 1
#define TC_WIRE_HDR 16
#define TC_WIRE_MAX_BODY (1u << 30)
#define TC_WIRE_NONCE 32
#define TC_WIRE_MAC 32
#define TC_WIRE_CTX 16   /* what the connection is for, bound into the MACs */

enum tc_wire_type {
  TC_WIRE_HELLO = 1,
  TC_WIRE_PROOF = 2,
  TC_WIRE_ACCEPT = 3,
  TC_WIRE_DATA = 4,   /* an allgather's block (or the TCP root's answer) */
  TC_WIRE_FD = 5      /* a descriptor follows in the control message (mesh) */
};

#define TC_WIRE_HELLO_BODY TC_WIRE_NONCE
#define TC_WIRE_PROOF_BODY (8 + TC_WIRE_NONCE + TC_WIRE_MAC)
#define TC_WIRE_ACCEPT_BODY TC_WIRE_MAC

struct tc_wire_hdr {
  uint32_t magic;
  uint16_t version, type;
  uint32_t length, seq;
};

/* The key and context of a handshake: key is the communicator's secret
 * (or the rendezvous key), ctx names the connection's purpose. */
struct tc_wire_key {
  unsigned char key[32];
  unsigned char ctx[TC_WIRE_CTX];
};

struct tc_wire_proof {
  uint32_t rank, nranks;
  unsigned char nonce[TC_WIRE_NONCE];
  unsigned char mac[TC_WIRE_MAC];
};

/* Writes a header into out[TC_WIRE_HDR]. */
void tc_wire_put_hdr(unsigned char *out, uint16_t type, uint32_t length, uint32_t seq);
/* Reads a header from len bytes at p; 0, or -1 with why (len < 16, bad
 * magic, version, unknown type, length past TC_WIRE_MAX_BODY). */
int tc_wire_get_hdr(const unsigned char *p, size_t len, struct tc_wire_hdr *h, char *why,
                    size_t wl);
/* 0 when h is exactly (type, length, seq); else -1 with why. */
int tc_wire_expect(const struct tc_wire_hdr *h, uint16_t type, uint32_t length, uint32_t seq,
                   char *why, size_t wl);

/* The handshake's MACs (kind: TC_WIRE_PROOF or TC_WIRE_ACCEPT). */
void tc_wire_mac(const struct tc_wire_key *k, int kind, const unsigned char *nonce_l,
                 const unsigned char *nonce_c, uint32_t rank, uint32_t nranks,
                 unsigned char mac[TC_WIRE_MAC]);
/* Encodes a PROOF message (header + body) into out (TC_WIRE_HDR +
 * TC_WIRE_PROOF_BODY bytes). */
void tc_wire_put_proof(unsigned char *out, const struct tc_wire_proof *pr);
/* The listener's check of a PROOF message of len bytes: the header, the
 * ranks (rk->nranks must be the listener's; rank in [rk->lo, rk->hi))
 * and the MAC over
 * nonce_l, compared in constant time.  0 with *pr filled, or -1 with why. */
struct tc_wire_ranks {
  uint32_t nranks, lo, hi;
};
int tc_wire_check_proof(const struct tc_wire_key *k, const unsigned char *nonce_l,
                        const unsigned char *msg, size_t len, const struct tc_wire_ranks *rk,
                        struct tc_wire_proof *pr, char *why, size_t wl);
/* The connector's check of the listener's HELLO (0: nonce_l filled) and
 * ACCEPT (0: the MAC is the key's). */
int tc_wire_check_hello(const unsigned char *msg, size_t len, unsigned char *nonce_l, char *why,
                        size_t wl);
int tc_wire_check_accept(const struct tc_wire_key *k, const unsigned char *msg, size_t len,
                         const unsigned char *nonce_l, const struct tc_wire_proof *pr, char *why,
                         size_t wl);

/* 1 when a string field of cap bytes from the wire ends (NUL) within it. */
int tc_wire_str_ok(const char *s, size_t cap);

#endif
