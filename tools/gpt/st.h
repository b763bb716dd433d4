/* SPDX-License-Identifier: Apache-2.0
 * st.h -- the safetensors format, written and read by te-gpt's
 * checkpoints: an 8-byte little-endian header length n, n bytes of JSON
 * (one object: per tensor {"dtype", "shape", "data_offsets": [begin,
 * end]}, offsets relative to the data that follows the header, plus an
 * optional "__metadata__" object of string values), then the data.
 *
 * The reader treats the file as untrusted input: st_parse checks every
 * field and refuses, with a message naming what is wrong, bad JSON, a
 * header past the file, unknown dtypes, a shape whose byte size
 * overflows or differs from its offsets, offsets out of the data or
 * overlapping another tensor's, duplicate names (in n log n: 200,000
 * tensors take a fraction of a second), "__metadata__" twice, more than
 * ST_MAX_META metadata entries, and names or values too long.  It never
 * reads past len and allocates only what the header's size (bounded by
 * len) needs.  Its messages are printable ASCII (st_escape): they quote
 * the file's names.  The strings it returns (metadata values, names) are
 * the file's as they are: a caller prints them through st_escape.
 * A reader of a file need not hold it whole to check it: st_header_len
 * on the first 8 bytes and the file's size, st_parse_header on the
 * header, then only the data the tensors name (st_data_end).  No libte
 * dependency: the fuzzer links it alone (t/fuzz/fuzz_parse_st.c). */
#ifndef TE_GPT_ST_H
#define TE_GPT_ST_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 8
#define ST_MAX_NAME 160      /* bytes of a tensor name or metadata key, with the NUL */
#define ST_MAX_VALUE 1024    /* bytes of a metadata value, with the NUL */
#define ST_MAX_HEADER (64u << 20)
#define ST_MAX_META 1024     /* metadata entries */

enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_I32, ST_I64, ST_U8, ST_F64, ST_NDTYPES };

struct st_tensor {
  char name[ST_MAX_NAME];
  enum st_dtype dtype;
  int ndim;
  uint64_t shape[ST_MAX_DIMS];
  uint64_t begin, end;       /* byte offsets into the data */
  const void *data;          /* parsed: begin's address in the caller's buffer */
};

struct st_meta {
  char key[ST_MAX_NAME];
  char value[ST_MAX_VALUE];
};

struct st_file {
  struct st_tensor *t;
  size_t nt;
  struct st_meta *meta;
  size_t nmeta;
  uint64_t data_len;
  const struct st_tensor **by_name;   /* t sorted by name (st_find) */
};

/* Parses buf[0..len).  0 and *f filled (its tensors point into buf), or
 * -1 with a message in err (errlen bytes) and *f empty. */
int st_parse(const uint8_t *buf, size_t len, struct st_file *f, char *err, size_t errlen);
/* The header's length *n from a file's first 8 bytes, checked against
 * the file's length and ST_MAX_HEADER.  0, or -1 with err. */
int st_header_len(const uint8_t first8[8], uint64_t file_len, uint64_t *n, char *err,
                  size_t errlen);
/* Parses the n-byte header hdr of a file whose data (after the header)
 * is data_len bytes: as st_parse, but the tensors' data pointers stay
 * NULL until st_set_data.  0, or -1 with err and *f empty. */
int st_parse_header(const char *hdr, size_t n, uint64_t data_len, struct st_file *f, char *err,
                    size_t errlen);
/* The end of the last tensor's bytes in the data: what a reader needs. */
uint64_t st_data_end(const struct st_file *f);
/* Points each tensor's data at its bytes of data. */
void st_set_data(struct st_file *f, const uint8_t *data);
void st_free(struct st_file *f);
/* s into out (n bytes with the NUL) with every byte outside printable
 * ASCII (controls, DEL, bytes of UTF-8) as \xNN, cut at a whole escape;
 * the length written. */
size_t st_escape(const char *s, char *out, size_t n);
const struct st_tensor *st_find(const struct st_file *f, const char *name);
const char *st_meta_get(const struct st_file *f, const char *key);
/* Bytes of one element of d. */
size_t st_dtype_size(enum st_dtype d);
const char *st_dtype_name(enum st_dtype d);

/* Writes a file: tensors t[0..n) with their data (t[i].data, their bytes
 * from dtype and shape; begin/end are computed), in that order, and the
 * metadata.  0, or -1 with err. */
int st_write(const char *path, struct st_tensor *t, size_t n, const struct st_meta *meta,
             size_t nmeta, char *err, size_t errlen);

#endif
