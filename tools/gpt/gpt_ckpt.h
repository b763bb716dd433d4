/* SPDX-License-Identifier: Apache-2.0
 * gpt_ckpt.h -- one safetensors file open for reading tensors by name,
 * shared by te-gpt's checkpoints (gpt_ckpt.c) and its Hugging Face
 * import (gpt_hf.c). */
#ifndef TE_GPT_CKPT_H
#define TE_GPT_CKPT_H

#include "gpt.h"
#include "st.h"

/* The file's header parsed; the tensors' bytes stay in the file until
 * gpt_ckpt_read reads one (after checking its shape), so a file costs no
 * more memory than its largest tensor asked for, whatever its header or
 * size claim. */
struct gpt_ckpt {
  char path[4096];
  int fd;
  uint64_t data_off;   /* where the data starts: 8 + the header */
  struct st_file f;
};
/* dir/file opened and its header checked: 0, or -1 with a message */
int gpt_ckpt_open(const char *dir, const char *file, struct gpt_ckpt *c);
void gpt_ckpt_close(struct gpt_ckpt *c);
/* The F32 tensor name, [rows][cols] (a vector of cols when rows is 1),
 * every value finite, as a new host array (caller frees); NULL with a
 * message naming the tensor. */
float *gpt_ckpt_read(const struct gpt_ckpt *ck, const char *name, size_t rows, size_t cols);
/* p's values from host F32 h, the whole tensor (gpt_tp_whole_shape; --tp:
 * this rank's slice taken): its master (or F32 value) and its BF16 copy
 * rounded as AdamW rounds it. */
void gpt_param_set(struct gpt_model *m, struct gpt_param *p, const float *h, tecore_stream_t s);
/* This rank writes the files of --save and --save-hf (rank 0 of --tp and
 * of --dp, or one process). */
int gpt_ckpt_writer(const struct gpt_model *m);
/* p's whole F32 values as a host array (the caller frees), *rows x *cols:
 * --zero's shards made whole, --tp's slices gathered.  Collective: every
 * rank calls it for every parameter in m's order; NULL on all but the
 * writer. */
float *gpt_param_values(const struct gpt_model *m, const struct gpt_param *p, size_t *rows,
                        size_t *cols, tecore_stream_t s);

/* config.json's text (gpt_hf.c): the value after "key":, an integer key
 * in [lo, hi] (def when absent, def < 0: required), a string key's value
 * among want (absent: def) */
const char *gpt_hf_json_value(const char *text, const char *key);
int gpt_hf_json_int(const char *text, const char *path, const char *key, long lo, long hi,
                    long def, int *out);
int gpt_hf_json_is(const char *text, const char *key, const char *const *want, int n, int def);
/* DIR/config.json written from fmt and its arguments (--save-hf's
 * errors); 0 or -1 */
int gpt_hf_write_config(const char *dir, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Llama's layout (gpt_hf_llama.c): config.json's text into c, the
 * weights from an open model.safetensors, --save-hf; each 0 or -1 */
int gpt_hf_llama_config(const char *text, const char *path, struct gpt_config *c);
int gpt_hf_llama_load(const struct gpt_ckpt *ck, struct gpt_model *m, tecore_stream_t s);
int gpt_hf_llama_save(const char *dir, struct gpt_model *m, const char *tokenizer,
                      tecore_stream_t s);
/* --save-hf's last part: the tokenizer (or NULL) copied into dir; 0 or -1 */
int gpt_hf_finish(const char *dir, const char *tokenizer);

#endif
