/* span.h -- SPDX-License-Identifier: Apache-2.0
 * The aliasing rule of libte, stated once: the named byte ranges one call
 * reads and writes, and the search for the first pair that breaks the
 * rule.  Every call that takes device buffers checks its ranges through
 * te_span_conflict before it queues anything: libtecore's kernel families
 * through te_check_alias / te_check_spans (ksupport.h), libtegraph's
 * replays directly.  This header and span.c use nothing of libtecore but
 * its public types, so libtegraph compiles span.c into itself (a library's
 * internal symbols are not exported) and both libraries apply one rule.
 *
 * The rule.  A span is read, written, or written by a reduction (an
 * atomic max or add that several writers may share).  Two spans that
 * share a byte conflict when either is written, except:
 *   - a written span and a read span with the same nonzero `pair` that
 *     are exactly the same range (same address, same length): an update
 *     in place the call allows (unscale's out[i] over in[i], a GEMM's D
 *     over its C, an activation's out over its in);
 *   - two reduction spans that are exactly the same range (several
 *     tensors max-accumulating into one amax).
 * Read spans may overlap each other freely.  An absent span (address 0 or
 * length 0) overlaps nothing. */
#ifndef TECORE_KSUPPORT_SPAN_H
#define TECORE_KSUPPORT_SPAN_H

#include <stddef.h>
#include <te/device.h>

/* te_span.access */
#define TE_ACCESS_READ 0u
#define TE_ACCESS_WRITE 1u
#define TE_ACCESS_REDUCE 3u   /* written by an atomic reduction: WRITE | 2 */

struct te_span {
  const char *name;     /* as the detail names it: "out->data"; with field set, an
                           array's name: "tensors" */
  tecore_devptr_t p;
  size_t bytes;
  unsigned access;      /* TE_ACCESS_* */
  unsigned pair;        /* 0, or the tag of an allowed exact in-place pair */
  const char *field;    /* NULL, or what follows "[idx]" in the name: ".param" */
  size_t idx;
};

/* 1 when [a.p, a.p + a.bytes) and [b.p, b.p + b.bytes) share a byte (the
 * ends computed without wrapping). */
static inline int te_span_overlap(struct te_span a, struct te_span b) {
  if (!a.p || !b.p || !a.bytes || !b.bytes) return 0;
  return a.p - b.p < b.bytes || b.p - a.p < a.bytes;
}

/* Looks for the first pair of s[0..n) that breaks the rule above.  Returns
 * 0 when there is none; else 1, with "<written> overlaps <other>" (and,
 * when the pair was an allowed in-place pair but not the same range,
 * " other than as the very same range (in place)") in msg.  Host-side
 * arithmetic only: O(n log n) after a sort, so long lists (an optimizer's
 * thousands of tensors) stay cheap. */
int te_span_conflict(const struct te_span *s, size_t n, char *msg, size_t len);
/* The span's name as details give it ("out->data", "tensors[3].param"). */
const char *te_span_name(const struct te_span *s, char *buf, size_t len);

#endif
