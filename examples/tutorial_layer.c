/* SPDX-License-Identifier: Apache-2.0 */
/* tutorial_layer.c -- libte-tutorial(7)'s program: from a tensor to a
 * trained transformer layer.
 *
 * One Llama-style block (RMSNorm, grouped-query causal attention with
 * RoPE, SwiGLU MLP) learns a task that needs attention: each token's
 * target is the mean of its sequence's tokens so far (its causal
 * prefix), a smooth function it cannot compute from itself alone.  A
 * step: forward, the mean squared error and its gradient on the host,
 * backward, AdamW.  Checked: the loss is finite and falls below half its
 * first value within STEPS steps.
 *
 * Build and run against an installed libte:
 *   cc -std=c99 tutorial_layer.c $(pkg-config --cflags --libs te-core) -lm \
 *     -Wl,-rpath,"$(pkg-config --variable=libdir te-core)" -o tutorial_layer
 *   ./tutorial_layer      (TE_DEVICE=vdev runs it without a GPU)
 * Exit 0 when the loss fell, 1 otherwise. */
#include <te/core.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* 4 sequences of 16 tokens, 32 features; 4 query heads over 2 KV heads */
enum { BATCH = 4, SEQ = 16, ROWS = BATCH * SEQ, HID = 32, STEPS = 60 };

#define TRY(call)                                                                  \
  do {                                                                             \
    if ((call) != TECORE_SUCCESS) {                                                \
      fprintf(stderr, "tutorial_layer: %s: %s\n", #call, tecore_last_error());     \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static tecore_devptr_t host(void *p) { return (tecore_devptr_t)(uintptr_t)p; }

static tecore_devptr_t dev_alloc(size_t bytes) {
  tecore_devptr_t p;
  TRY(tecore_mem_alloc(bytes, &p));
  return p;
}

int main(void) {
  static float x[ROWS * HID], target[ROWS * HID], y[ROWS * HID], dy[ROWS * HID];
  srand(11);
  for (int i = 0; i < ROWS * HID; i++) x[i] = (float)rand() / RAND_MAX * 2.f - 1.f;
  /* target: the running mean of each feature over the sequence so far */
  for (int b = 0; b < BATCH; b++)
    for (int f = 0; f < HID; f++) {
      double sum = 0;
      for (int t = 0; t < SEQ; t++) {
        sum += x[(b * SEQ + t) * HID + f];
        target[(b * SEQ + t) * HID + f] = (float)(sum / (t + 1));
      }
    }

  TRY(tecore_init());
  tecore_stream_t s;
  TRY(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));

  /* 1. a tensor: device memory with a dtype and a shape */
  size_t shape[2] = {ROWS, HID};
  struct tecore_tensor tx, ty, tdy;
  TRY(tecore_tensor_init(&tx, TECORE_DTYPE_F32, 2, shape, dev_alloc(sizeof x)));
  TRY(tecore_tensor_init(&ty, TECORE_DTYPE_F32, 2, shape, dev_alloc(sizeof y)));
  TRY(tecore_tensor_init(&tdy, TECORE_DTYPE_F32, 2, shape, dev_alloc(sizeof dy)));
  TRY(tecore_memcpy(tx.data, host(x), sizeof x));

  /* 2. a layer: one transformer block in a fuser sequence */
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HID, .dtype = TECORE_DTYPE_F32,
                                  .seed = 1};
  tecore_seq_t *seq;
  TRY(tecore_seq_create(&cfg, &seq));
  struct tecore_transformer_desc block = {
      .hidden = HID, .heads = 4, .kv_heads = 2, .ffn = 64,
      .norm = TECORE_OP_RMSNORM, .activation = TECORE_OP_SWIGLU,
      .rope = 1, .attn_flags = TECORE_ATTN_CAUSAL, .batch = BATCH, .max_seqlen = SEQ};
  TRY(tecore_seq_add_transformer(seq, &block));
  TRY(tecore_seq_build(seq, s));
  char plan[1024];
  TRY(tecore_seq_describe(seq, TECORE_SEQ_FORWARD, plan, sizeof plan, NULL));
  printf("tutorial_layer: %s\n", plan);

  /* 3. the optimizer's view of the parameters (an F32 sequence's values
   * are the master weights, updated in place) and AdamW's moments */
  size_t np = 0;
  TRY(tecore_seq_params(seq, NULL, 0, &np));
  struct tecore_seq_param *p = calloc(np, sizeof *p);
  struct tecore_optim_tensor *ot = calloc(np, sizeof *ot);
  if (!p || !ot) return 1;
  TRY(tecore_seq_params(seq, p, np, &np));
  for (size_t i = 0; i < np; i++) {
    ot[i].numel = tecore_tensor_numel(&p[i].value);
    ot[i].param = p[i].value.data;
    ot[i].grad = p[i].grad.data;
    ot[i].grad_dtype = TECORE_DTYPE_F32;
    ot[i].exp_avg = dev_alloc(ot[i].numel * 4);
    ot[i].exp_avg_sq = dev_alloc(ot[i].numel * 4);
    TRY(tecore_memset_d32_async(ot[i].exp_avg, 0, ot[i].numel, s));
    TRY(tecore_memset_d32_async(ot[i].exp_avg_sq, 0, ot[i].numel, s));
  }

  /* 4. training: forward, loss, backward, step */
  double first = 0, loss = 0;
  for (int step = 1; step <= STEPS; step++) {
    TRY(tecore_seq_zero_grad(seq, s));
    TRY(tecore_seq_forward(seq, &tx, &ty, 0, s));
    TRY(tecore_stream_synchronize(s));
    TRY(tecore_memcpy(host(y), ty.data, sizeof y));
    loss = 0;
    for (int i = 0; i < ROWS * HID; i++) {
      double d = y[i] - target[i];
      loss += d * d / (ROWS * HID);
      dy[i] = (float)(2 * d / (ROWS * HID));
    }
    TRY(tecore_memcpy(tdy.data, host(dy), sizeof dy));
    TRY(tecore_seq_backward(seq, &tdy, NULL, s));
    struct tecore_adam_config adam = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                      .weight_decay = 0.01, .step = step,
                                      .flags = TECORE_ADAM_W};
    TRY(tecore_adam_step(ot, np, &adam, 0, 0, s));
    if (!isfinite(loss)) {
      fprintf(stderr, "tutorial_layer: step %d: the loss is %g\n", step, loss);
      return 1;
    }
    if (step == 1) first = loss;
    if (step == 1 || step % 10 == 0) printf("tutorial_layer: step %2d  loss %.6f\n", step, loss);
  }

  /* 5. clean up: the sequence frees what it allocated, the caller the rest */
  TRY(tecore_stream_synchronize(s));
  for (size_t i = 0; i < np; i++) {
    TRY(tecore_mem_free(ot[i].exp_avg));
    TRY(tecore_mem_free(ot[i].exp_avg_sq));
  }
  TRY(tecore_seq_destroy(seq));
  TRY(tecore_mem_free(tx.data));
  TRY(tecore_mem_free(ty.data));
  TRY(tecore_mem_free(tdy.data));
  TRY(tecore_stream_destroy(s));
  free(p);
  free(ot);
  if (!(loss < 0.5 * first)) {
    fprintf(stderr, "tutorial_layer: the loss went from %.6f to %.6f in %d steps: not below "
            "half\n", first, loss, STEPS);
    return 1;
  }
  printf("tutorial_layer: the loss fell from %.6f to %.6f\n", first, loss);
  return 0;
}
