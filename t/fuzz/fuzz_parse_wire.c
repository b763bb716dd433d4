/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_parse_wire.c -- fuzz-parse's target 6: libtecomm's bootstrap and
 * mesh messages (libtecomm/boot/wire.c, compiled in: its parsers are private
 * to the library).  The input after the target byte is:
 *   how   one byte: which field of a well-made message to spoil (below)
 *   rest  the bytes of a message, as they would come off a socket
 * and each input goes through
 *   1. tc_wire_get_hdr on the raw bytes: accepted only with 16 bytes or
 *      more, the magic, the version, a known type and a bounded length,
 *      each field as the bytes spell it; a refusal says why;
 *   2. the handshake's checks (HELLO, PROOF, ACCEPT) on the raw bytes:
 *      a PROOF or ACCEPT accepted must carry the MAC of this key;
 *   3. a PROOF made well from the input's fields (rank, nranks, nonces)
 *      under a key, with the byte at `how` flipped (how past the message:
 *      none): accepted exactly when nothing was flipped and its ranks are
 *      the listener's;
 *   4. tc_wire_str_ok on a 64-byte field (a host name): 1 exactly when a
 *      NUL lies within it. */
#include "fuzz_parse.h"
#include "boot/wire.h"
#include "te_sha256.h"

#include <stdio.h>
#include <string.h>

static void bad(int cond, const char *what, const char *why) {
  if (!cond) return;
  char m[400];
  snprintf(m, sizeof m, "wire: %s (%s)", what, why ? why : "");
  fz_parse_finding(m);
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void raw_header(const unsigned char *p, size_t n) {
  struct tc_wire_hdr h;
  char why[160] = "";
  int ok = tc_wire_get_hdr(p, n, &h, why, sizeof why) == 0;
  fz_parse_calls++;
  bad(!ok && !why[0], "a refused header says nothing", NULL);
  if (!ok) return;
  bad(n < TC_WIRE_HDR, "a header shorter than 16 bytes was taken", NULL);
  bad(h.magic != TC_WIRE_MAGIC || le32(p) != TC_WIRE_MAGIC, "a wrong magic was taken", NULL);
  bad(h.version != TC_WIRE_VERSION, "a wrong version was taken", NULL);
  bad(h.type < TC_WIRE_HELLO || h.type > TC_WIRE_FD, "an unknown type was taken", NULL);
  bad(h.length > TC_WIRE_MAX_BODY || h.length != le32(p + 8), "a length was taken wrongly", NULL);
  bad(h.seq != le32(p + 12), "the sequence number was read wrongly", NULL);
}

static void raw_handshake(const struct tc_wire_key *k, const unsigned char *p, size_t n) {
  unsigned char nonce[TC_WIRE_NONCE] = {7}, got[TC_WIRE_NONCE];
  char why[160] = "";
  struct tc_wire_proof pr;
  fz_parse_calls += 3;
  if (tc_wire_check_proof(k, nonce, p, n, &(struct tc_wire_ranks){3, 1, 3}, &pr, why,
                          sizeof why) == 0) {
    unsigned char mac[TC_WIRE_MAC];
    tc_wire_mac(k, TC_WIRE_PROOF, nonce, pr.nonce, pr.rank, pr.nranks, mac);
    bad(memcmp(mac, pr.mac, sizeof mac) != 0, "a proof with a wrong MAC was taken", NULL);
    bad(pr.rank < 1 || pr.rank >= 3 || pr.nranks != 3, "a proof of the wrong ranks was taken",
        NULL);
  } else {
    bad(!why[0], "a refused proof says nothing", NULL);
  }
  why[0] = '\0';
  if (tc_wire_check_hello(p, n, got, why, sizeof why) == 0)
    bad(n != TC_WIRE_HDR + TC_WIRE_HELLO_BODY || memcmp(got, p + TC_WIRE_HDR, sizeof got),
        "a hello was read wrongly", NULL);
  else
    bad(!why[0], "a refused hello says nothing", NULL);
  memset(&pr, 0, sizeof pr);
  pr.rank = 1;
  pr.nranks = 3;
  why[0] = '\0';
  if (tc_wire_check_accept(k, p, n, nonce, &pr, why, sizeof why) == 0) {
    unsigned char mac[TC_WIRE_MAC];
    tc_wire_mac(k, TC_WIRE_ACCEPT, nonce, pr.nonce, pr.rank, pr.nranks, mac);
    bad(n < TC_WIRE_HDR + TC_WIRE_MAC || memcmp(mac, p + TC_WIRE_HDR, sizeof mac),
        "an answer with a wrong MAC was taken", NULL);
  } else {
    bad(!why[0], "a refused answer says nothing", NULL);
  }
}

static void made_proof(const struct tc_wire_key *k, unsigned how, const unsigned char *p,
                       size_t n) {
  unsigned char f[8 + 2 * TC_WIRE_NONCE] = {0};
  memcpy(f, p, n < sizeof f ? n : sizeof f);
  struct tc_wire_proof pr;
  unsigned char nonce_l[TC_WIRE_NONCE], msg[TC_WIRE_HDR + TC_WIRE_PROOF_BODY];
  pr.rank = f[0] % 5;         /* 0..4: some inside [1, 3), some not */
  pr.nranks = 2 + f[1] % 3;   /* 2..4: the listener's is 3 */
  memcpy(pr.nonce, f + 8, TC_WIRE_NONCE);
  memcpy(nonce_l, f + 8 + TC_WIRE_NONCE, TC_WIRE_NONCE);
  tc_wire_mac(k, TC_WIRE_PROOF, nonce_l, pr.nonce, pr.rank, pr.nranks, pr.mac);
  tc_wire_put_proof(msg, &pr);
  int flipped = how < sizeof msg;
  if (flipped) msg[how] ^= (unsigned char)(1u << (f[2] % 8));
  struct tc_wire_proof got;
  char why[160] = "";
  int ok = tc_wire_check_proof(k, nonce_l, msg, sizeof msg, &(struct tc_wire_ranks){3, 1, 3}, &got, why,
                               sizeof why) == 0;
  fz_parse_calls++;
  int want = !flipped && pr.rank >= 1 && pr.rank < 3 && pr.nranks == 3;
  bad(ok != want, ok ? "a spoiled or foreign proof was taken" : "a good proof was refused", why);
  /* the same message cut short: never taken */
  size_t cut = (size_t)f[3] % sizeof msg;
  fz_parse_calls++;
  bad(tc_wire_check_proof(k, nonce_l, msg, cut, &(struct tc_wire_ranks){3, 1, 3}, &got, why,
                          sizeof why) == 0,
      "a proof cut short was taken", NULL);
}

void fz_parse_wire(const uint8_t *data, size_t len) {
  static const struct tc_wire_key k = {.key = {1, 2, 3, 4, 5}, .ctx = "fuzz-parse"};
  if (len == 0) return;
  unsigned how = data[0];
  const unsigned char *p = data + 1;
  size_t n = len - 1;
  raw_header(p, n);
  raw_handshake(&k, p, n);
  made_proof(&k, how, p, n);
  char host[64];
  memset(host, 'x', sizeof host);
  memcpy(host, p, n < sizeof host ? n : sizeof host);
  fz_parse_calls++;
  bad(tc_wire_str_ok(host, sizeof host) != (memchr(host, 0, sizeof host) != NULL),
      "a host name's end was judged wrongly", NULL);
}
