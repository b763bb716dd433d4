/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_parse_st.c -- fuzz-parse's target 7: te-gpt's safetensors reader
 * (tools/gpt/st.c, compiled in), whose input is an untrusted checkpoint
 * file.  The bytes after the target byte are the file.  The oracle: a
 * refusal leaves a message of printable ASCII only (it quotes the file's
 * names: an escape sequence there must not reach a terminal) and an
 * empty result; an accepted file's tensors each lie inside the data,
 * span exactly their shape's bytes, overlap no other tensor, have
 * distinct non-empty names and are found by st_find under them, and its
 * metadata keys are distinct. */
#include "fuzz_parse.h"
#include "st.h"

#include <stdio.h>
#include <string.h>

static void bad(int cond, const char *what, const char *name) {
  if (!cond) return;
  char m[400];
  snprintf(m, sizeof m, "safetensors: %s (%s)", what, name ? name : "");
  fz_parse_finding(m);
}

void fz_parse_st(const uint8_t *data, size_t len) {
  struct st_file f;
  char err[512] = "";
  int rc = st_parse(data, len, &f, err, sizeof err);
  fz_parse_calls++;
  if (rc) {
    bad(!err[0], "a refusal without a message", NULL);
    for (const char *c = err; *c; c++)
      if (*c < 0x20 || *c > 0x7e) {
        bad(1, "a refusal's message holds a byte outside printable ASCII", NULL);
        break;
      }
    bad(f.nt || f.t || f.nmeta || f.meta, "a refusal left a result", err);
    return;
  }
  bad(len < 8 || f.data_len > len - 8, "the data is longer than the file", NULL);
  for (size_t i = 0; i < f.nt; i++) {
    const struct st_tensor *t = &f.t[i];
    unsigned __int128 bytes = st_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) bytes *= t->shape[d];
    bad(!t->name[0], "an empty name accepted", NULL);
    bad(t->begin > t->end || t->end > f.data_len, "a tensor outside the data", t->name);
    bad(bytes != (unsigned __int128)(t->end - t->begin), "a span that is not its shape", t->name);
    bad((const uint8_t *)t->data != data + len - f.data_len + t->begin,
        "a data pointer elsewhere", t->name);
    bad(st_find(&f, t->name) != t, "st_find does not find a tensor by its name", t->name);
    for (size_t j = i + 1; j < f.nt; j++) {
      const struct st_tensor *u = &f.t[j];
      bad(!strcmp(t->name, u->name), "a name twice", t->name);
      bad(t->begin < u->end && u->begin < t->end, "overlapping tensors", t->name);
    }
  }
  for (size_t i = 0; i < f.nmeta; i++)
    for (size_t j = i + 1; j < f.nmeta; j++)
      bad(!strcmp(f.meta[i].key, f.meta[j].key), "a metadata key twice", f.meta[i].key);
  st_free(&f);
}
