/* SPDX-License-Identifier: Apache-2.0 */
/* train_step.c -- training with the operation fuser: a model of fuser
 * operations, FP8 (delayed scaling), trained by Adam to fit a target.
 *
 * The model: y = Linear2(GELU(Linear1(RMSNorm(x)))), x and y [ROWS][F],
 * Linear1 F -> 4F and Linear2 4F -> F with biases, in F32 with the FP8
 * recipe: the fuser quantizes weights and activations to E4M3/E5M2 for
 * the GEMMs and keeps the amax history.  A step, for each of 2
 * microbatches: forward, the mean squared error against a fixed target
 * and its gradient (here on the host, for clarity), backward (gradients
 * accumulate); then the FP8 scales are updated and Adam takes the step.
 * The FP8 weight copies are quantized on the first microbatch only (the
 * forward's no-op flag is 1 on the second: the weights did not change).
 * Checked: the loss is finite at every step and falls below half its
 * first value within STEPS steps.
 *
 * Build and run against an installed libte:
 *   cc -std=c99 train_step.c $(pkg-config --cflags --libs te-core) -lm \
 *     -Wl,-rpath,"$(pkg-config --variable=libdir te-core)" -o train_step
 *   ./train_step          (TE_DEVICE=vdev runs it without a GPU)
 * Exit 0 when the loss fell, 1 otherwise. */
#include <te/core.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { ROWS = 32, F = 64, MB = 2, STEPS = 30 };

#define TRY(call)                                                                  \
  do {                                                                             \
    if ((call) != TECORE_SUCCESS) {                                                \
      fprintf(stderr, "train_step: %s: %s\n", #call, tecore_last_error());         \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

static tecore_devptr_t host(void *p) { return (tecore_devptr_t)(uintptr_t)p; }

static tecore_devptr_t dev_alloc(size_t bytes) {
  tecore_devptr_t p;
  TRY(tecore_mem_alloc(bytes, &p));
  return p;
}

static float frand(void) { return (float)rand() / RAND_MAX * 2.f - 1.f; }

int main(void) {
  static float x[MB][ROWS * F], target[MB][ROWS * F], y[ROWS * F], dy[ROWS * F];
  srand(7);
  for (int m = 0; m < MB; m++)
    for (int i = 0; i < ROWS * F; i++) {
      x[m][i] = frand();
      /* a target the model can learn: a smooth function of the input */
      target[m][i] = 0.5f * tanhf(x[m][i] + 0.5f * x[m][(i + 1) % (ROWS * F)]);
    }

  TRY(tecore_init());
  tecore_stream_t s;
  TRY(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));

  /* the model: four fuser operations, built for ROWS x F inputs */
  struct tecore_seq_config cfg = {.rows = ROWS, .features = F, .dtype = TECORE_DTYPE_F32,
                                  .seed = 1};
  struct tecore_op_desc ops[4] = {{.kind = TECORE_OP_RMSNORM, .epsilon = 1e-5f},
                                  {.kind = TECORE_OP_LINEAR, .features = 4 * F, .bias = 1},
                                  {.kind = TECORE_OP_GELU},
                                  {.kind = TECORE_OP_LINEAR, .features = F, .bias = 1}};
  tecore_seq_t *seq;
  TRY(tecore_seq_create(&cfg, &seq));
  for (int i = 0; i < 4; i++) TRY(tecore_seq_add(seq, &ops[i], NULL));
  struct tecore_recipe recipe;
  TRY(tecore_recipe_init(&recipe, TECORE_RECIPE_DELAYED));   /* FP8, delayed scaling */
  TRY(tecore_seq_set_recipe(seq, &recipe, s));
  TRY(tecore_seq_build(seq, s));

  /* the optimizer's view of the parameters: an F32 sequence's values are
   * the master weights themselves, updated in place */
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
    ot[i].exp_avg = dev_alloc(ot[i].numel * 4);      /* Adam's moments, from 0 */
    ot[i].exp_avg_sq = dev_alloc(ot[i].numel * 4);
    TRY(tecore_memset_d32_async(ot[i].exp_avg, 0, ot[i].numel, s));
    TRY(tecore_memset_d32_async(ot[i].exp_avg_sq, 0, ot[i].numel, s));
  }

  /* device buffers: the inputs, the output, its gradient, the no-op flags */
  size_t shape[2] = {ROWS, F};
  struct tecore_tensor tx[MB], ty, tdy;
  for (int m = 0; m < MB; m++) {
    TRY(tecore_tensor_init(&tx[m], TECORE_DTYPE_F32, 2, shape, dev_alloc(sizeof x[m])));
    TRY(tecore_memcpy(tx[m].data, host(x[m]), sizeof x[m]));
  }
  TRY(tecore_tensor_init(&ty, TECORE_DTYPE_F32, 2, shape, dev_alloc(sizeof y)));
  TRY(tecore_tensor_init(&tdy, TECORE_DTYPE_F32, 2, shape, dev_alloc(sizeof dy)));
  tecore_devptr_t flags = dev_alloc(8);   /* int32 0 (quantize weights), 1 (reuse them) */
  TRY(tecore_memset_d32_async(flags, 0, 1, s));
  TRY(tecore_memset_d32_async(flags + 4, 1, 1, s));

  double first = 0, loss = 0;
  for (int step = 1; step <= STEPS; step++) {
    TRY(tecore_seq_zero_grad(seq, s));
    loss = 0;
    for (int m = 0; m < MB; m++) {
      TRY(tecore_seq_forward(seq, &tx[m], &ty, flags + (m == 0 ? 0 : 4), s));
      TRY(tecore_stream_synchronize(s));
      TRY(tecore_memcpy(host(y), ty.data, sizeof y));
      /* loss = mean over both microbatches of (y - target)^2 */
      for (int i = 0; i < ROWS * F; i++) {
        double d = y[i] - target[m][i];
        loss += d * d / (ROWS * F * MB);
        dy[i] = (float)(2 * d / (ROWS * F * MB));
      }
      TRY(tecore_memcpy(tdy.data, host(dy), sizeof dy));
      TRY(tecore_seq_backward(seq, &tdy, NULL, s));   /* gradients accumulate */
    }
    TRY(tecore_seq_update_scales(seq, s));   /* the FP8 amax history -> next scales */
    struct tecore_adam_config adam = {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                      .step = step};
    TRY(tecore_adam_step(ot, np, &adam, 0, 0, s));
    if (!isfinite(loss)) {
      fprintf(stderr, "train_step: step %d: the loss is %g\n", step, loss);
      return 1;
    }
    if (step == 1) first = loss;
    if (step == 1 || step % 10 == 0) printf("train_step: step %2d  loss %.6f\n", step, loss);
  }
  TRY(tecore_stream_synchronize(s));
  for (int m = 0; m < MB; m++) TRY(tecore_mem_free(tx[m].data));
  TRY(tecore_mem_free(ty.data));
  TRY(tecore_mem_free(tdy.data));
  TRY(tecore_mem_free(flags));
  for (size_t i = 0; i < np; i++) {
    TRY(tecore_mem_free(ot[i].exp_avg));
    TRY(tecore_mem_free(ot[i].exp_avg_sq));
  }
  TRY(tecore_seq_destroy(seq));
  TRY(tecore_stream_destroy(s));
  free(p);
  free(ot);
  if (!(loss < 0.5 * first)) {
    fprintf(stderr, "train_step: the loss went from %.6f to %.6f in %d steps: not below half\n",
            first, loss, STEPS);
    return 1;
  }
  printf("train_step: loss %.6f -> %.6f in %d FP8 steps\n", first, loss, STEPS);
  return 0;
}
