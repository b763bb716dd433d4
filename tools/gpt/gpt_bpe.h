/* SPDX-License-Identifier: Apache-2.0
 * gpt_bpe.h -- byte-level BPE as GPT-2 and Llama 3 use it: the tokenizer read from a
 * Hugging Face tokenizer.json (model.vocab, model.merges, added_tokens) or
 * from vocab.json with merges.txt beside it (gpt_bpe_load.c); text split
 * by GPT-2's pre-tokenizer (or Llama 3's), each piece's bytes merged by rank, the ids
 * decoded back to bytes (gpt_bpe.c).  Llama 3's tokenizer.json: its
 * pre-tokenizer regex recognised and split by its rules instead, and
 * model.ignore_merges honoured.  Tokens are held as byte strings:
 * the files' byte-to-unicode alphabet is undone on reading. */
#ifndef TE_GPT_BPE_H
#define TE_GPT_BPE_H

#include <stddef.h>
#include <stdint.h>

#define GPT_BPE_MAX_FILE ((uint64_t)256 << 20)   /* a tokenizer file's bytes */
#define GPT_BPE_MAX_VOCAB (1u << 21)              /* ids below */
#define GPT_BPE_NONE UINT32_MAX

enum gpt_bpe_split { GPT_BPE_GPT2, GPT_BPE_LLAMA3 };

struct gpt_bpe_merge {
  uint64_t pair;          /* left id << 32 | right id; 0 with id NONE: an empty slot */
  uint32_t rank, id;      /* the merge's place in the list, the merged token */
};

struct gpt_bpe {
  uint32_t vocab;                /* the largest id + 1 */
  uint8_t *pool;                 /* the tokens' bytes */
  size_t pool_len;
  uint64_t *tok;                 /* [vocab]: offset << 16 | length; 0: no token of this id */
  uint32_t *by_bytes;            /* open addressing, bytes -> id (NONE: empty) */
  size_t by_bytes_mask;
  struct gpt_bpe_merge *merges;  /* open addressing on pair */
  size_t merges_mask, nmerges;
  uint32_t byte_id[256];         /* the token of each single byte (NONE: absent) */
  uint32_t *special;             /* added tokens matched in text before the split */
  size_t nspecial;
  int split;                     /* enum gpt_bpe_split: the pre-tokenizer */
  int ignore_merges;             /* a piece that is a token is not merged */
  int vocab_json;                /* read from vocab.json and merges.txt, not a tokenizer.json */
};

/* Reads path: a tokenizer.json, or a vocab.json (merges.txt from its
 * directory).  NULL with a message on stderr naming the file and the byte
 * offset of what is wrong.  Freed by gpt_bpe_free. */
struct gpt_bpe *gpt_bpe_load(const char *path);
void gpt_bpe_free(struct gpt_bpe *b);
/* A tokenizer file's bytes (at most GPT_BPE_MAX_FILE, a regular file) in
 * a new NUL-terminated buffer, *len of them; NULL with a message. */
char *gpt_bpe_file(const char *path, size_t *len);

/* the id of bytes s[0..n) (NONE: no such token) */
uint32_t gpt_bpe_lookup(const struct gpt_bpe *b, const uint8_t *s, size_t n);

/* text[0..n) (any bytes, invalid UTF-8 included) as ids appended to *ids
 * (*count of them, capacity *cap, grown with realloc; the caller frees).
 * 0, or -1 with a message (a byte without a token, out of memory). */
int gpt_bpe_encode(const struct gpt_bpe *b, const uint8_t *text, size_t n, uint32_t **ids,
                   size_t *count, size_t *cap);

/* the bytes of ids[0..n) into a new buffer (NUL-terminated, *len bytes
 * before the NUL; the caller frees); NULL with a message for an id that
 * is no token */
uint8_t *gpt_bpe_decode(const struct gpt_bpe *b, const uint32_t *ids, size_t n, size_t *len);

/* GPT-2's pre-tokenizer: the end of the piece that starts at t[i] (i < n) */
size_t gpt_bpe_piece_end(const uint8_t *t, size_t n, size_t i);
/* Llama 3's pre-tokenizer, the same way */
size_t gpt_bpe_piece_end_llama3(const uint8_t *t, size_t n, size_t i);

#endif
