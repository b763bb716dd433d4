/* SPDX-License-Identifier: Apache-2.0
 * gpt_json.h -- a strict JSON reader for files te-gpt does not control
 * (a tokenizer's tokenizer.json, vocab.json): the whole document parsed
 * into a tree of nodes held in one array, strings decoded to UTF-8 in one
 * pool.  Untrusted: depth bounded, every byte checked, a malformed
 * document refused with the byte offset where it went wrong. */
#ifndef TE_GPT_JSON_H
#define TE_GPT_JSON_H

#include <stddef.h>

enum gpt_json_type { GPT_JNULL, GPT_JBOOL, GPT_JNUM, GPT_JSTR, GPT_JARR, GPT_JOBJ };

struct gpt_jnode {
  int type;        /* enum gpt_json_type */
  int kid, next;   /* first child (array/object), next sibling; -1: none */
  size_t key, keylen;   /* an object member's name: offset and length in the pool */
  size_t str, len;      /* a string's bytes in the pool */
  double num;
  size_t off;      /* the byte offset of the value in the text */
};

struct gpt_json {
  struct gpt_jnode *n;   /* n[0]: the document's value */
  size_t count, cap;
  char *pool;
  size_t pool_len, pool_cap;
};

/* Parses text[0..len): 0, or -1 with why (naming the byte offset) in
 * err.  j is freed with gpt_json_free either way. */
int gpt_json_parse(struct gpt_json *j, const char *text, size_t len, char *err, size_t errlen);
void gpt_json_free(struct gpt_json *j);
/* the member called key of object node at (-1: none or not an object) */
int gpt_json_get(const struct gpt_json *j, int at, const char *key);

#endif
