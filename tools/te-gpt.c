/* SPDX-License-Identifier: Apache-2.0 */
/* te-gpt -- libte's main job: trains a GPT- or Llama-style transformer
 * from C on bytes (vocabulary 256; by default libte's own man pages, so it
 * runs anywhere with nothing to download), then samples text from it.
 * The model (tools/gpt/gpt_model.c): token embedding -> `layers` pre-norm
 * blocks, final norm and an untied LM head, all one fuser sequence
 * (te/ops.h) -> cross-entropy; AdamW with warmup and cosine decay, global
 * gradient-norm clipping, gradient accumulation, BF16 or FP8
 * (tools/gpt/gpt_train.c); checkpoints in safetensors that resume with
 * the same bits (tools/gpt/gpt_ckpt.c); generation (tools/gpt/gpt_sample.c).
 * Prints a row per step (loss, validation loss every --eval-every steps,
 * time, tokens/s, model TFLOP/s, memory) through tools/out.h. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <te/core.h>
#include "cli.h"
#include "out.h"
#include <te/comm.h>
#include "demo_tp.h"
#include "demo_offload.h"
#include "gpt/gpt.h"

struct preset {
  const char *name;
  struct gpt_config c;
  int batch;
  double lr;
};
/* layers, hidden, heads, kv_heads, ffn, seq, vocab, norm, act, rope, bias (share_saved,
 * wgrad_bf16, recompute: the run's options, set later), rope_theta */
static const struct preset presets[] = {
    {"tiny", {2, 64, 4, 4, 256, 64, 256, GPT_LAYERNORM, GPT_GELU, 1, 1, 0, 0, 0, 0}, 4, 1e-2},
    {"gpt2-124m", {12, 768, 12, 12, 3072, 1024, 50304, GPT_LAYERNORM, GPT_GELU, 0, 1, 0, 0, 0, 0}, 8, 6e-4},
    {"gpt2-350m", {24, 1024, 16, 16, 4096, 1024, 50304, GPT_LAYERNORM, GPT_GELU, 0, 1, 0, 0, 0, 0}, 8, 6e-4},
    {"gpt-1.3b", {24, 2048, 16, 16, 8192, 2048, 50304, GPT_LAYERNORM, GPT_GELU, 0, 1, 0, 0, 0, 0}, 8, 6e-4},
    {"llama-1b", {16, 2048, 32, 8, 8192, 2048, 128256, GPT_RMSNORM, GPT_SWIGLU, 1, 0, 0, 0, 0, 0}, 4, 3e-4},
    {"llama3-8b", {32, 4096, 32, 8, 14336, 8192, 128256, GPT_RMSNORM, GPT_SWIGLU, 1, 0, 0, 0, 0, 500000.0f}, 1, 3e-4},
};
/* --sample-check's limit on |logit(KV cache) - logit(whole model)|, a
 * fraction of the largest |logit| (both BF16: a rounding of the logits
 * is 2^-8 relative, and the two paths round hidden states at other
 * places); observed at most 2^-6 (one rounding of logits of 2 to 4) over
 * 200 seeds of three shapes: the limit is >= 3x that */
#define GPT_KV_TOL 0.05
static const char *const norm_words[] = {"layernorm", "rmsnorm"};
static const char *const act_words[] = {"gelu", "swiglu", "geglu", "relu"};
static const char *const recipe_words[] = {"none", "delayed", "current", "block"};
static const char *const wgrad_words[] = {"auto", "bf16", "f32"};
static const char *const recompute_words[] = {"none", "selective", "full"};

static const char usage_text[] =
    "usage: te-gpt [options]   (te-gpt -h | --help | --version)\n"
    "  trains a GPT/Llama-style transformer on bytes (default: libte's man pages), then\n"
    "  samples text; a row per step: loss, validation loss, ms, tokens/s, TFLOP/s, memory\n"
    "model (a preset, then any of its sizes changed):\n"
    "  --model NAME       tiny (default), gpt2-124m, gpt2-350m, gpt-1.3b, llama-1b, llama3-8b\n"
    "  --layers N         blocks\n"
    "  --hidden N         model width\n"
    "  --heads N          query heads\n"
    "  --kv-heads N       key/value heads (divides --heads)\n"
    "  --ffn N            MLP width (gated activations: each half)\n"
    "  --seq N            tokens per sequence\n"
    "  --vocab N          vocabulary (>= 256 for byte data)\n"
    "  --norm NAME        layernorm or rmsnorm\n"
    "  --act NAME         gelu, swiglu, geglu or relu\n"
    "  --rope 0|1         RoPE on queries and keys (0: a learned position table)\n"
    "  --bias 0|1         biases in the Linears (the LM head has none)\n"
    "data:\n"
    "  --data FILE        train on FILE's bytes (repeat for more files); the last tenth\n"
    "                     is held out for the validation loss\n"
    "  --corpus-dir DIR   without --data: the man pages under DIR (man1, man3, man7)\n"
    "  --synthetic        random tokens at any vocabulary (speed runs)\n"
    "training:\n"
    "  --steps N          train until step N (default 30)\n"
    "  --batch N          sequences per microbatch (preset's)\n"
    "  --accum N          microbatches per step (gradient accumulation, default 1)\n"
    "  --lr X             peak learning rate (tiny: 1e-2, GPT-2 sizes: 6e-4, llama-1b: 3e-4)\n"
    "  --min-lr X         the cosine's floor (default lr / 10)\n"
    "  --warmup N         linear warmup steps (default decay-steps / 10)\n"
    "  --decay-steps N    the schedule's length (default --steps)\n"
    "  --weight-decay X   AdamW's decoupled decay of matrices (default 0.1)\n"
    "  --clip X           global gradient-norm clip (default 1.0; 0: none)\n"
    "  --recipe NAME      none (BF16, default), delayed (margin 1), current, block\n"
    "  --seed N           initialization and sampling (default 1)\n"
    "  --tp N             tensor parallelism over N ranks (forked processes): every block\n"
    "                     split, the rest replicated; --save writes the one-process files,\n"
    "                     --load takes any run's, every rank decodes --sample, rank 0 prints\n"
    "  --share-saved 0|1  lay the saved tensors the backward never reads over shared\n"
    "                     scratch by their lifetimes (default 1)\n"
    "  --wgrad TYPE       the Linears' weight gradients: bf16 (the GEMM's output, as\n"
    "                     PyTorch's autocast), f32, or auto (default: bf16 with --accum 1,\n"
    "                     else f32, which sums the microbatches unrounded)\n"
    "  --recompute MODE   none (default), selective (RoPE, attention and the MLP's\n"
    "                     activation again in the backward) or full (every block again\n"
    "                     from its input): less activation memory for more work\n"
    "  --offload          activation offload: the blocks' saved tensors go to pinned host\n"
    "                     memory during the forward and come back ahead of the backward\n"
    "                     (attached after two plain steps, whose time sizes the prefetch)\n"
    "  --offload-layers N offload the first N blocks only (default: all)\n"
    "  --offload-prefetch N  blocks reloaded ahead (default: chosen from a model of the\n"
    "                     copies against the plain step); given, offload starts at step 1\n"
    "  --offload-min-elems N  tensors with fewer elements stay (default 262144, TE's, or\n"
    "                     one [tokens][hidden] activation when that is smaller)\n"
    "  --offload-dir DIRS spill past the host budget to files in DIRS (comma-separated)\n"
    "  --host-budget MB   pinned host memory for offload (default: what it needs)\n"
    "  --no-graph         eager launches (default: from step 2 on the whole step replays one\n"
    "                     graph; the decode step replays one graph)\n"
    "  --graph-launch chain|device|host  the step graphs queued to a launcher kernel that\n"
    "                     waits on the device (default: a step costs the host two stores,\n"
    "                     no driver call; tecore_graph_chain_create), launched by one\n"
    "                     kernel node that launches them from the device, or by the host\n"
    "                     (with --offload, or when the graph cannot be)\n"
    "  --no-pipeline      wait for each step before queueing the next (default: the host\n"
    "                     queues the next step graph before it waits for this one)\n"
    "  --profile          print step 3's (or 2's) device time per kernel on stderr (eager)\n"
    "  --plan             print the fuser's forward and backward plans (its fusions)\n"
    "  --eval-every N     validation loss every N steps (default 10; 0: never)\n"
    "  --eval-batches N   batches of the validation loss (default 4)\n"
    "checkpoints (safetensors):\n"
    "  --save DIR         after the last step: DIR/model.safetensors, DIR/optimizer.safetensors\n"
    "  --load DIR         resume from DIR (its model shape; the run continues at its step)\n"
    "generation:\n"
    "  --sample N         bytes to generate after training (default 64; 0: none)\n"
    "  --prompt TEXT      the text to continue (default a newline)\n"
    "  --temperature X    0: greedy (default); else softmax at X\n"
    "  --top-k N          sample among the N likeliest bytes (0: all)\n"
    "  --sample-check     check the KV-cache logits against the whole model's (exit 1 past\n"
    "                     GPT_KV_TOL of the largest logit)\n"
    "output:\n"
    "  --csv              the step rows as CSV on stdout (notes on stderr)\n"
    "  --json             a JSON document: the step rows, the summary, the sample\n"
    "  -q, --quiet        the rows only\n"
    "  -h, --help         this text\n"
    "  --version          the version\n"
    "exit status: 0 ok, 1 the work failed, 2 a wrong command line\n";

enum {
  O_MODEL = 0x100, O_LAYERS, O_HIDDEN, O_HEADS, O_KV, O_FFN, O_SEQ, O_VOCAB, O_NORM, O_ACT,
  O_ROPE, O_BIAS, O_DATA, O_CORPUS, O_SYNTH, O_STEPS, O_BATCH, O_ACCUM, O_LR, O_MINLR, O_WARMUP,
  O_DECAY, O_WD, O_CLIP, O_RECIPE, O_SEED, O_EVAL, O_EVALB, O_SAVE, O_LOAD, O_SAMPLE, O_PROMPT,
  O_TEMP, O_TOPK, O_SCHECK, O_NOGRAPH, O_TP, O_SHARE, O_WGRAD, O_PROFILE, O_PLAN, O_OFFLOAD, O_OFF_LAYERS,
  O_OFF_PREFETCH, O_OFF_DIR, O_HOST_BUDGET, O_OFF_MIN, O_GLAUNCH, O_NOPIPE, O_RECOMP
};
static const struct option longs[] = {
    TE_CLI_LONGS, TE_CLI_FORMATS,
    {"model", required_argument, 0, O_MODEL}, {"layers", required_argument, 0, O_LAYERS},
    {"hidden", required_argument, 0, O_HIDDEN}, {"heads", required_argument, 0, O_HEADS},
    {"kv-heads", required_argument, 0, O_KV}, {"ffn", required_argument, 0, O_FFN},
    {"seq", required_argument, 0, O_SEQ}, {"vocab", required_argument, 0, O_VOCAB},
    {"norm", required_argument, 0, O_NORM}, {"act", required_argument, 0, O_ACT},
    {"rope", required_argument, 0, O_ROPE}, {"bias", required_argument, 0, O_BIAS},
    {"data", required_argument, 0, O_DATA}, {"corpus-dir", required_argument, 0, O_CORPUS},
    {"synthetic", no_argument, 0, O_SYNTH}, {"steps", required_argument, 0, O_STEPS},
    {"batch", required_argument, 0, O_BATCH}, {"accum", required_argument, 0, O_ACCUM},
    {"lr", required_argument, 0, O_LR}, {"min-lr", required_argument, 0, O_MINLR},
    {"warmup", required_argument, 0, O_WARMUP}, {"decay-steps", required_argument, 0, O_DECAY},
    {"weight-decay", required_argument, 0, O_WD}, {"clip", required_argument, 0, O_CLIP},
    {"recipe", required_argument, 0, O_RECIPE}, {"seed", required_argument, 0, O_SEED},
    {"eval-every", required_argument, 0, O_EVAL}, {"eval-batches", required_argument, 0, O_EVALB},
    {"save", required_argument, 0, O_SAVE}, {"load", required_argument, 0, O_LOAD},
    {"sample", required_argument, 0, O_SAMPLE}, {"prompt", required_argument, 0, O_PROMPT},
    {"temperature", required_argument, 0, O_TEMP}, {"top-k", required_argument, 0, O_TOPK},
    {"sample-check", no_argument, 0, O_SCHECK}, {"no-graph", no_argument, 0, O_NOGRAPH},
    {"tp", required_argument, 0, O_TP}, {"share-saved", required_argument, 0, O_SHARE},
    {"wgrad", required_argument, 0, O_WGRAD},
    {"profile", no_argument, 0, O_PROFILE}, {"plan", no_argument, 0, O_PLAN},
    {"offload", no_argument, 0, O_OFFLOAD},
    {"offload-layers", required_argument, 0, O_OFF_LAYERS},
    {"offload-prefetch", required_argument, 0, O_OFF_PREFETCH},
    {"offload-dir", required_argument, 0, O_OFF_DIR},
    {"host-budget", required_argument, 0, O_HOST_BUDGET},
    {"offload-min-elems", required_argument, 0, O_OFF_MIN},
    {"graph-launch", required_argument, 0, O_GLAUNCH},
    {"no-pipeline", no_argument, 0, O_NOPIPE},
    {"recompute", required_argument, 0, O_RECOMP},
    {0, 0, 0, 0}};

struct opts {
  struct gpt_config c;
  int given[12];               /* which shape options were given (O_LAYERS.. O_BIAS) */
  const char *model;
  char **files;
  int nfiles, synthetic;
  const char *corpus_dir, *save, *load, *prompt;
  int steps, batch, accum, warmup, decay_steps, recipe, eval_every, eval_batches, sample, top_k;
  int host_launch;   /* --graph-launch host */
  int launch_given;  /* --graph-launch given */
  int no_chain;      /* --graph-launch device or host */
  int no_pipeline;   /* --no-pipeline */
  int sample_check, no_graph, tp, sample_given, quiet, share_saved, profile, plan;
  int wgrad;         /* --wgrad: 0 auto, 1 bf16, 2 f32 */
  double lr, min_lr, wd, clip, temperature;
  long long seed;
  struct demo_offload_opts off;   /* --offload and its options */
  int off_given;                  /* an --offload-* option or --host-budget was given */
};

static int word_of(struct te_cli *cli, const char *flag, const char *arg, const char *const *w,
                   int n, int *out) {
  for (int i = 0; i < n; i++)
    if (!strcmp(arg, w[i])) return *out = i, 0;
  return te_cli_error(cli, "%s: unknown value '%s'", flag, arg);
}

/* the option at hand; TE_EXIT_USAGE after a reported error */
static int take(struct te_cli *cli, struct opts *o, int opt, const char *a) {
  int *shape[] = {&o->c.layers, &o->c.hidden, &o->c.heads, &o->c.kv_heads, &o->c.ffn,
                  &o->c.seq,    &o->c.vocab};
  static const int hi[] = {1024, 65536, 1024, 1024, 1 << 20, 1 << 20, 1 << 24};
  static const int lo[] = {1, 8, 1, 1, 1, 1, 2};
  const char *flag = NULL;
  for (const struct option *l = longs; l->name; l++)
    if (l->val == opt) flag = l->name;
  char f[40];
  snprintf(f, sizeof f, "--%s", flag ? flag : "?");
  if (opt >= O_LAYERS && opt <= O_BIAS) o->given[opt - O_LAYERS] = 1;
  if (opt >= O_LAYERS && opt <= O_VOCAB)
    return te_cli_int(cli, f, a, lo[opt - O_LAYERS], hi[opt - O_LAYERS], shape[opt - O_LAYERS]);
  long long ll;
  switch (opt) {
  case O_MODEL: o->model = a; return 0;
  case O_NORM: return word_of(cli, f, a, norm_words, 2, &o->c.norm);
  case O_ACT: return word_of(cli, f, a, act_words, 4, &o->c.act);
  case O_ROPE: return te_cli_int(cli, f, a, 0, 1, &o->c.rope);
  case O_BIAS: return te_cli_int(cli, f, a, 0, 1, &o->c.bias);
  case O_DATA: o->files[o->nfiles++] = (char *)a; return 0;
  case O_CORPUS: o->corpus_dir = a; return 0;
  case O_SYNTH: o->synthetic = 1; return 0;
  case O_STEPS: return te_cli_int(cli, f, a, 0, 100000000, &o->steps);
  case O_BATCH: return te_cli_int(cli, f, a, 1, 65536, &o->batch);
  case O_ACCUM: return te_cli_int(cli, f, a, 1, 4096, &o->accum);
  case O_LR: return te_cli_double(cli, f, a, 0, 10, &o->lr);
  case O_MINLR: return te_cli_double(cli, f, a, 0, 10, &o->min_lr);
  case O_WARMUP: return te_cli_int(cli, f, a, 0, 100000000, &o->warmup);
  case O_DECAY: return te_cli_int(cli, f, a, 1, 100000000, &o->decay_steps);
  case O_WD: return te_cli_double(cli, f, a, 0, 10, &o->wd);
  case O_CLIP: return te_cli_double(cli, f, a, 0, 1e9, &o->clip);
  case O_RECIPE: return word_of(cli, f, a, recipe_words, 4, &o->recipe);
  case O_SEED:
    if (te_cli_long(cli, f, a, 0, (1ll << 62), 0, &ll)) return TE_EXIT_USAGE;
    o->seed = ll;
    return 0;
  case O_EVAL: return te_cli_int(cli, f, a, 0, 100000000, &o->eval_every);
  case O_EVALB: return te_cli_int(cli, f, a, 1, 100000, &o->eval_batches);
  case O_SAVE: o->save = a; return 0;
  case O_LOAD: o->load = a; return 0;
  case O_SAMPLE: o->sample_given = 1; return te_cli_int(cli, f, a, 0, 1 << 20, &o->sample);
  case O_PROMPT: o->prompt = a; return 0;
  case O_TEMP: return te_cli_double(cli, f, a, 0, 100, &o->temperature);
  case O_TOPK: return te_cli_int(cli, f, a, 0, 1 << 24, &o->top_k);
  case O_SCHECK: o->sample_check = 1; return 0;
  case O_NOGRAPH: o->no_graph = 1; return 0;
  case O_NOPIPE: o->no_pipeline = 1; return 0;
  case O_GLAUNCH:
    if (strcmp(a, "chain") && strcmp(a, "device") && strcmp(a, "host"))
      return te_cli_error(cli, "--graph-launch must be chain, device or host, not '%s'", a);
    o->host_launch = !strcmp(a, "host");
    o->no_chain = strcmp(a, "chain") != 0;
    o->launch_given = 1;
    return 0;
  case O_TP: return te_cli_int(cli, f, a, 1, DEMO_TP_MAX, &o->tp);
  case O_SHARE: return te_cli_int(cli, f, a, 0, 1, &o->share_saved);
  case O_WGRAD: return word_of(cli, f, a, wgrad_words, 3, &o->wgrad);
  case O_RECOMP: return word_of(cli, f, a, recompute_words, 3, &o->c.recompute);
  case O_PROFILE: o->profile = o->no_graph = 1; return 0;
  case O_PLAN: o->plan = 1; return 0;
  case O_OFFLOAD: o->off.on = 1; return 0;
  case O_OFF_LAYERS: o->off_given = 1; return te_cli_int(cli, f, a, 1, 1024, &o->off.layers);
  case O_OFF_PREFETCH: o->off_given = 1; return te_cli_int(cli, f, a, 1, 999, &o->off.prefetch);
  case O_OFF_DIR: o->off_given = 1; o->off.dirs = a; return 0;
  case O_OFF_MIN:
    o->off_given = 1;
    if (te_cli_long(cli, f, a, 1, 1ll << 40, 0, &ll)) return TE_EXIT_USAGE;
    o->off.min_elems = (size_t)ll;
    return 0;
  case O_HOST_BUDGET:
    o->off_given = 1;
    return te_cli_double(cli, f, a, 0.03125, 1 << 24, &o->off.host_budget_mb);
  default: return te_cli_error(cli, "option %d not handled", opt);
  }
}

/* --tp n must divide the heads, the key/value heads and the MLP width of
 * c (the options', or those of the checkpoint `from`) */
static int tp_misfit(struct te_cli *cli, int n, const struct gpt_config *c, const char *from) {
  if (c->heads % n == 0 && c->kv_heads % n == 0 && c->ffn % n == 0) return 0;
  return te_cli_error(cli, "--tp %d must divide --heads %d, --kv-heads %d and --ffn %d%s", n,
                      c->heads, c->kv_heads, c->ffn, from);
}

/* the preset, then the given sizes over it; the shape's rules */
static int resolve(struct te_cli *cli, struct opts *o, struct gpt_config given, int *batch) {
  const struct preset *p = NULL;
  for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
    if (!strcmp(o->model, presets[i].name)) p = &presets[i];
  if (!p) return te_cli_error(cli, "--model: unknown model '%s'", o->model);
  int *dst[] = {&o->c.layers, &o->c.hidden, &o->c.heads, &o->c.kv_heads, &o->c.ffn, &o->c.seq,
                &o->c.vocab, &o->c.norm, &o->c.act, &o->c.rope, &o->c.bias};
  const int *src[] = {&given.layers, &given.hidden, &given.heads, &given.kv_heads, &given.ffn,
                      &given.seq, &given.vocab, &given.norm, &given.act, &given.rope, &given.bias};
  const int *pre[] = {&p->c.layers, &p->c.hidden, &p->c.heads, &p->c.kv_heads, &p->c.ffn,
                      &p->c.seq, &p->c.vocab, &p->c.norm, &p->c.act, &p->c.rope, &p->c.bias};
  for (int i = 0; i < 11; i++) *dst[i] = o->given[i] ? *src[i] : *pre[i];
  o->c.rope_theta = p->c.rope_theta;   /* no option: the preset's (0: 10000) */
  /* a preset's kv_heads follow a given --heads unless given too */
  if (o->given[2] && !o->given[3]) o->c.kv_heads = o->c.heads;
  if (!*batch) *batch = p->batch;
  if (o->lr < 0) o->lr = p->lr;
  const struct gpt_config *c = &o->c;
  if (c->hidden % c->heads) return te_cli_error(cli, "--hidden %d is not a multiple of --heads %d", c->hidden, c->heads);
  int hd = c->hidden / c->heads;
  if (hd % 8 || hd > 256)
    return te_cli_error(cli, "head size %d (--hidden / --heads): a multiple of 8, at most 256", hd);
  if (c->heads % c->kv_heads)
    return te_cli_error(cli, "--kv-heads %d does not divide --heads %d", c->kv_heads, c->heads);
  if (!o->synthetic && c->vocab < 256)
    return te_cli_error(cli, "--vocab %d: byte data needs at least 256 (or --synthetic)", c->vocab);
  if (o->nfiles && o->synthetic) return te_cli_error(cli, "--data and --synthetic: one or the other");
  if (o->top_k && o->temperature <= 0) return te_cli_error(cli, "--top-k needs --temperature > 0");
  if (o->off_given && !o->off.on)
    return te_cli_error(cli, "--offload-layers, --offload-prefetch, --offload-min-elems, "
                             "--offload-dir and --host-budget need --offload");
  if (o->off.on && o->tp > 1) return te_cli_error(cli, "--offload and --tp: one or the other");
  if (o->off.on && o->c.recompute)
    return te_cli_error(cli, "--offload and --recompute: one or the other");
  /* --tp with --load: the checkpoint's shape, checked by parse */
  if (o->tp > 1 && !o->load && tp_misfit(cli, o->tp, c, "")) return TE_EXIT_USAGE;
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static struct te_out OUT = {.tool = "te-gpt"};
static const struct te_out_col step_cols[] = {
    {"step", TE_OUT_NUM, 6, "%.0f", 0, 0},         {"loss", TE_OUT_NUM, 9, "%.4f", 0, 0},
    {"val_loss", TE_OUT_NUM, 9, "%.4f", 0, 0},     {"lr", TE_OUT_NUM, 9, "%.2e", 0, 0},
    {"grad_norm", TE_OUT_NUM, 9, "%.3f", 0, 0},    {"ms", TE_OUT_NUM, 9, "%.1f", 0, 0},
    {"tokens_per_s", TE_OUT_NUM, 12, "%.0f", 0, "tokens/s"},
    {"tflops", TE_OUT_NUM, 9, "%.4f", 0, "TFLOP/s"}, {"mem_mib", TE_OUT_NUM, 9, "%.1f", 0, "MiB"}};


/* --tp: n floats at buf summed over the ranks on the device, in stream
 * order (captured into the step graph; the eager first step makes the
 * call's first, which may allocate) */
static void sum_ranks(tecore_devptr_t buf, size_t n, struct gpt_model *m, tecore_stream_t s) {
  tecomm_result_t r =
      tecomm_allreduce((tecomm_comm_t)m->tp.comm, buf, buf, n, TECORE_DTYPE_F32, TECOMM_SUM, s);
  if (r != TECOMM_SUCCESS) {
    GPT_ERR("--tp: the gradient norms' sum: %s (%s)", tecomm_strerror(r), tecomm_last_error());
    exit(1);
  }
}

/* --offload: the blocks are the sequence's first operations, the same
 * number each (then the final norm and the LM head); attached between
 * steps, after plain_ms of a plain step sized the prefetch.  The step
 * graph is captured after one eager step with offload (the caller's). */
static void offload_attach(struct demo_offload *dof, struct opts *o, struct gpt_model *m,
                           double plain_ms, long long step) {
  size_t nops = 0;
  free(gpt_forward_groups(m, &nops));
  struct demo_offload_opts oo = o->off;
  oo.ops_per_block = (nops - 2) / (size_t)m->c.layers;
  oo.plain_step_ms = plain_ms;
  oo.microbatches = o->accum;
  oo.tool = "te-gpt";
  size_t act = m->rows * (size_t)m->c.hidden;
  if (!oo.min_elems) oo.min_elems = act < 262144 ? act : 262144;
  demo_offload_attach(dof, &oo, m->seq, m->c.layers, 1);
  const struct tegraph_offload_stats *st = &dof->st;
  int nb = oo.layers > 0 && oo.layers < m->c.layers ? oo.layers : m->c.layers;
  int out = nb - (dof->prefetch + 1);
  te_out_note(&OUT, "offload: after step %lld, %d of %d blocks attached (%d leave the device, "
              "prefetch %d%s), %zu saved tensors offloaded, %zu kept; sequence %.1f -> %.1f MiB "
              "+ ring %.1f MiB; %.1f MiB a pass to host, %.1f to files; pool %.1f MiB",
              step, nb, m->c.layers, out > 0 ? out : 0, dof->prefetch,
              o->off.prefetch > 0 ? ", given" : dof->predicted > 0 ? ", modelled" : "",
              st->offloaded, st->kept, st->seq_bytes_before / 1048576.0,
              st->seq_bytes_after / 1048576.0, st->ring_bytes / 1048576.0,
              st->pass_to_host / 1048576.0, st->pass_to_files / 1048576.0,
              st->pool_bytes / 1048576.0);
  if (dof->predicted > 0)
    te_out_note(&OUT, "offload: the copy model predicts %.3fx the plain step (%.1f ms)",
                dof->predicted, plain_ms);
}

/* FNV-1a of the sampled bytes: --tp compares the ranks' samples */
static uint64_t text_sum(const char *text, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)text[i]) * 0x100000001b3ull;
  return h;
}

/* One training run (one process, or rank tp->rank of a --tp run: its
 * losses into losses[], the sum of its sample into *sample_sum). */
/* The GELU in the GEMMs' epilogues where libte's own GEMM runs them (BF16
 * on compute capability 9.0, TECORE_GEMM_OWN: GPT-2 124M's step 1.6 ms
 * faster than with the GELU apart, bench/2026-11-26.md, session 29), as its own
 * kernels elsewhere (cuBLASLt's epilogues made that step 4.4% slower,
 * bench/2026-11-23.md, session 13), unless the user set TECORE_OPS_GELU_EPILOGUE. */
static void gelu_choice(const struct opts *o) {
  tecore_backend_t be;
  struct tecore_device_props pr;
  int own = !o->recipe && tecore_backend(&be) == TECORE_SUCCESS && be == TECORE_BACKEND_CUDA &&
            tecore_device_get_props(0, &pr) == TECORE_SUCCESS && pr.cc_major == 9 &&
            pr.cc_minor == 0;
  setenv("TECORE_OPS_GELU_EPILOGUE", own ? "1" : "0", 0);
}

static int run(struct opts *op, const struct gpt_tp *tp, double *losses, uint64_t *sample_sum) {
  struct opts o = *op;
  GPT_CHECK(tecore_init());
  gelu_choice(&o);
  tecore_stream_t s;
  GPT_CHECK(tecore_stream_create(0, 0, &s));
  if (o.load && gpt_load_config(o.load, &o.c)) return TE_EXIT_FAIL;
  struct gpt_data d;
  if (gpt_data_load(&d, o.files, o.nfiles, o.corpus_dir, o.c.seq, o.c.vocab, o.synthetic))
    return TE_EXIT_FAIL;
  struct tecore_recipe rec, *recipe = NULL;
  if (o.recipe) {
    static const tecore_recipe_kind_t kinds[] = {TECORE_RECIPE_DELAYED, TECORE_RECIPE_DELAYED,
                                                 TECORE_RECIPE_CURRENT, TECORE_RECIPE_BLOCK};
    GPT_CHECK(tecore_recipe_init(&rec, kinds[o.recipe]));
    if (kinds[o.recipe] == TECORE_RECIPE_DELAYED) rec.margin = 1;
    if (tp) rec.amax_reduce = tecomm_amax_reduce, rec.amax_reduce_ctx = tp->comm;
    recipe = &rec;
  }
  struct gpt_model m;
  o.c.share_saved = o.share_saved;
  o.c.wgrad_bf16 = o.wgrad == 1 || (o.wgrad == 0 && o.accum == 1);
  gpt_model_create_tp(&m, &o.c, (size_t)o.batch, o.accum, recipe, (uint64_t)o.seed, tp, s);
  size_t shared = 0, arenas = 0;
  if (o.share_saved) gpt_share_saved(&m, &shared, &arenas);
  struct gpt_train t = {.lr = o.lr, .min_lr = o.min_lr, .wd = o.wd, .beta1 = 0.9, .beta2 = 0.95,
                        .eps = 1e-8, .clip = o.clip, .warmup = o.warmup,
                        .decay_steps = o.decay_steps, .accum = o.accum,
                        .rng = (uint64_t)o.seed * 0x2545f4914f6cdd1dull + 0x6461746101ull,
                        .use_graph = !o.no_graph,
                        /* offload's copies overlap kernels only from the host */
                        .host_launch = o.host_launch || (o.off.on && !o.launch_given),
                        .pipeline = !o.no_pipeline && !o.off.on,
                        .chain_mode = !o.no_chain && !o.off.on,
                        .sum_ranks = tp ? sum_ranks : NULL};
  gpt_train_init(&t, &m, s);
  struct demo_offload dof;
  memset(&dof, 0, sizeof dof);
  if (o.off.on) t.use_graph = 0;   /* plain eager steps until offload is attached */
  int rc = TE_EXIT_OK;
  if (o.load && gpt_load(o.load, &m, &t, s)) {
    rc = TE_EXIT_FAIL;
    goto out;
  }

  size_t seq_total = 0;
  GPT_CHECK(tecore_seq_memory(m.seq, NULL, &seq_total));
  double mem_mib = (double)(seq_total + m.dev_bytes) / 1048576.0;
  const struct gpt_config *c = &m.c;
  /* N: every parameter but the embedding tables (lookups, no GEMM) */
  size_t ntab = (size_t)c->vocab * c->hidden + (c->rope ? 0 : (size_t)c->seq * c->hidden);
  size_t whole = m.nparams;   /* --tp: the other ranks' slices too */
  for (size_t i = 0; i < m.np && tp; i++)
    if (m.p[i].sharded && !strstr(m.p[i].name, "proj.bias") && !strstr(m.p[i].name, "fc2.bias"))
      whole += (size_t)(tp->size - 1) * m.p[i].rows * m.p[i].cols;   /* those two: rank 0 */
  double flops_per_token = 6.0 * (double)(whole - ntab) +
                           6.0 * c->layers * (double)c->hidden * c->seq;
  double tokens = (double)m.rows * o.accum;

  te_out_begin(&OUT);
  te_out_note(&OUT, "te-gpt: %s: %d layers, hidden %d, %d heads (%d kv), ffn %d, seq %d, vocab %d, "
              "%s, %s, %s, LM head untied; %.2fM parameters", o.load ? "loaded" : o.model,
              c->layers, c->hidden, c->heads, c->kv_heads, c->ffn, c->seq, c->vocab,
              norm_words[c->norm], act_words[c->act], c->rope ? "RoPE" : "learned positions",
              (double)whole / 1e6);
  te_out_note(&OUT, "data: %s; %zu training bytes, %zu held out", d.source, d.ntrain,
              d.n - d.ntrain);
  te_out_note(&OUT, "%s, batch %d x %d tokens x accum %d; AdamW lr %g (warmup %d, cosine to %g at "
              "step %d), weight decay %g, clip %g; %s",
              o.recipe ? recipe_words[o.recipe] : "BF16", o.batch, c->seq, o.accum, o.lr,
              o.warmup, o.min_lr, o.decay_steps, o.wd, o.clip,
              o.no_graph ? "eager launches" : "the whole step one graph from the second step");
  if (o.share_saved)
    te_out_note(&OUT, "saved tensors the backward never reads: %.1f MiB laid over %.1f MiB of "
                "shared scratch", (double)shared / 1048576.0, (double)arenas / 1048576.0);
  struct gpt_mem gm;
  gpt_mem_count(&m, &t, &gm);
  {
    const double Mi = 1048576.0;
    te_out_note(&OUT, "device memory %.1f MiB: parameters %.1f, their gradients %.1f, AdamW's "
                "masters and moments %.1f, embedding tables and gradients %.1f, saved for the "
                "backward %.1f, other saved tensors %.1f, FP8 copies and workspaces %.1f, "
                "logits %.1f, the rest %.1f", gm.total / Mi, gm.params / Mi, gm.grads / Mi,
                gm.optim / Mi, gm.tables / Mi, gm.saved_back / Mi, gm.saved_other / Mi,
                gm.fp8_other / Mi, gm.logits / Mi, gm.rest / Mi);
  }
  if (o.plan) {
    if (m.dlogits8)
      te_out_note(&OUT, "plan: cross-entropy backward -> the LM head's FP8 gradient%s",
                  m.dlogits8 == 2 ? ", over the logits" : "");
    for (int k = 0; k < 2; k++) {
      char *pl = gpt_describe(&m, k ? TECORE_SEQ_BACKWARD : TECORE_SEQ_FORWARD);
      te_out_note(&OUT, "plan %s", pl);
      te_out_field_s(&OUT, k ? "plan_backward" : "plan_forward", pl);
      free(pl);
    }
  }
  te_out_field_n(&OUT, "mem_saved_back_mib", gm.saved_back / 1048576.0);
  te_out_field_n(&OUT, "dlogits_fp8", m.dlogits8);
  te_out_field_n(&OUT, "mem_fp8_other_mib", gm.fp8_other / 1048576.0);
  te_out_field_s(&OUT, "model", o.load ? "loaded" : o.model);
  te_out_field_n(&OUT, "saved_shared_mib", (double)shared / 1048576.0);
  te_out_field_n(&OUT, "parameters", (double)whole);
  te_out_table(&OUT, "steps", step_cols, (int)(sizeof step_cols / sizeof step_cols[0]));
  double first = NAN, last = NAN, last_val = NAN, tsum = 0;
  int nsteps = 0;
  double plain_ms = 0;
  /* the steady steps' times for the median: from this run's third step
   * (the first two make the lazy choices and capture the graph; a run
   * resumed from --load counts from its own first), the last
   * GPT_MEDIAN_STEPS of them; runs of fewer than three steps, all */
  enum { GPT_MEDIAN_STEPS = 1024 };
  double ring[GPT_MEDIAN_STEPS];
  int nring = 0, first_steady = o.steps - (long long)t.step >= 3 ? 3 : 1;
  long long ring_from = 0;
  while (t.step < o.steps) {
    /* a given prefetch needs no plain steps: attached before the first,
     * so a model that fits only with offload runs at all */
    if (o.off.on && !dof.ctx && (nsteps == 2 || o.off.prefetch > 0)) {
      GPT_CHECK(tecore_stream_synchronize(s));
      offload_attach(&dof, &o, &m, plain_ms, (long long)t.step);
      size_t after = 0;
      GPT_CHECK(tecore_seq_memory(m.seq, NULL, &after));
      mem_mib = (double)(after + m.dev_bytes + dof.st.ring_bytes) / 1048576.0;
      t.use_graph = !o.no_graph;
      t.eager_steps = 0;   /* one eager step with offload, then the capture */
    }
    double t0 = now_s(), gn = 0;
    double lr = gpt_lr_at(&t, t.step + 1);
    /* step 1 makes the lazy choices, measuring GEMM algorithms among them:
     * on an H100 the step after that ran ~12% slow (clocks recovering),
     * so with three steps or more the third is the one profiled */
    const int pstep = o.steps >= 3 ? 3 : 2;
    int prof = o.profile && t.step + 1 == pstep;
    if (prof) GPT_CHECK(tecore_profile_start());
    /* the next step may be queued before this one is waited for when
     * nothing runs between them (a validation pass, the last step) */
    t.queue_next = t.step + 2 <= o.steps && !(o.eval_every && (t.step + 1) % o.eval_every == 0);
    double loss = gpt_train_step(&t, &m, &d, s, &gn);
    double dt = now_s() - t0;
    if (prof) {
      GPT_CHECK(tecore_profile_stop());
      te_out_progress_clear(&OUT);
      fprintf(stderr, "# te-gpt --profile: step %d, device time per kernel (eager launches):\n",
              pstep);
      fflush(stderr);
      GPT_CHECK(tecore_profile_report(2, NULL));
    }
    if (!isfinite(loss)) {
      te_out_progress_clear(&OUT);
      GPT_ERR("step %lld: the loss is %g", (long long)t.step, loss);
      rc = TE_EXIT_FAIL;
      goto out;
    }
    if (dof.ctx) demo_offload_check(&dof, (int)t.step);
    if (nsteps == 1) plain_ms = dt * 1e3;   /* the second plain step: lazy choices made */
    if (isnan(first)) first = loss;
    if (losses && t.step <= o.steps) losses[t.step - 1] = loss;
    last = loss;
    tsum += dt, nsteps++;
    if (nsteps >= first_steady) {
      if (nring == GPT_MEDIAN_STEPS) ring_from++;
      else if (!nring) ring_from = t.step;
      ring[(nsteps - first_steady) % GPT_MEDIAN_STEPS] = dt;
      if (nring < GPT_MEDIAN_STEPS) nring++;
    }
    struct te_out_val val = TE_OUT_NONE;
    if (o.eval_every && t.step % o.eval_every == 0) {
      last_val = gpt_val_loss(&t, &m, &d, o.eval_batches, s);
      /* those forwards have no backward: offload forgets what they saved */
      if (dof.ctx && tegraph_offload_reset(dof.ctx) != TEGRAPH_SUCCESS) {
        GPT_ERR("--offload: tegraph_offload_reset: %s", tegraph_last_error());
        rc = TE_EXIT_FAIL;
        goto out;
      }
      val = TE_OUT_N(last_val);
    }
    te_out_row(&OUT, (struct te_out_val[]){TE_OUT_N(t.step), TE_OUT_N(loss), val, TE_OUT_N(lr),
                                           TE_OUT_N(gn), TE_OUT_N(dt * 1e3),
                                           TE_OUT_N(tokens / dt),
                                           TE_OUT_N(tokens / dt * flops_per_token / 1e12),
                                           TE_OUT_N(mem_mib)});
  }
  te_out_table_end(&OUT);
  if (nsteps) {
    const double med = gpt_median(ring, (size_t)nring);
    te_out_note(&OUT, "loss %.4f -> %.4f over %d steps; %.1f ms/step, %.0f tokens/s (the median "
                "of steps %lld-%lld), %.1f ms/step on average over all", first, last, nsteps,
                med * 1e3, tokens / med, ring_from, ring_from + nring - 1,
                tsum / nsteps * 1e3);
    te_out_field_n(&OUT, "ms_median", med * 1e3);
    te_out_field_n(&OUT, "tokens_per_s_median", tokens / med);
    te_out_field_n(&OUT, "median_first_step", (double)ring_from);
  }
  if (t.launch_us > 0) {
    char census[128];
    gpt_graph_census(&t, census, sizeof census);
    const char *how = t.chain_launches ? "chain" : t.host_launch ? "host" : "device";
    te_out_note(&OUT, "step graph: %s (%s), %s in %.1f us of host time at the least, %.1f us "
                "median over %d launches%s",
                tp ? "every microbatch, the norm summed over the ranks, the clipping and AdamW"
                   : "every microbatch, the norm, the clipping and AdamW",
                census, t.chain_launches ? "queued to its launcher on the device (graph chain)"
                : t.host_launch ? "launched from the host" : "launched from the device",
                t.launch_us, gpt_launch_median(&t), t.nlaunch, t.chain_note);
    te_out_field_n(&OUT, "graph_launch_us", t.launch_us);
    te_out_field_n(&OUT, "graph_launch_us_median", gpt_launch_median(&t));
    te_out_field_s(&OUT, "graph_launch", how);
  }
  te_out_field_n(&OUT, "first_loss", first);
  te_out_field_n(&OUT, "last_loss", last);
  te_out_field_n(&OUT, "last_val_loss", last_val);
  if (o.save && gpt_save(o.save, &m, &t, s)) rc = TE_EXIT_FAIL;
  else if (o.save) te_out_note(&OUT, "saved step %lld to %s", (long long)t.step, o.save);
  if (o.sample > 0 && rc == TE_EXIT_OK) {
    char *text = gpt_xalloc((size_t)o.sample + 1);
    struct gpt_sample_opts so = {.n = o.sample, .top_k = o.top_k, .temperature = o.temperature,
                                 .seed = (uint64_t)o.seed, .prompt = o.prompt,
                                 .no_graph = o.no_graph};
    double diff = 0, big = 0, margin = 0;
    so.check = o.sample_check, so.check_diff = &diff, so.check_max = &big, so.margin = &margin;
    double s0 = now_s(), steady = 0;
    so.steady_t0 = &steady;
    if (o.profile) GPT_CHECK(tecore_profile_start());
    gpt_sample(&m, &so, text, s);
    if (sample_sum) *sample_sum = text_sum(text, (size_t)o.sample);
    double s1 = now_s(), sdt = s1 - s0;
    if (o.profile) {
      GPT_CHECK(tecore_profile_stop());
      fprintf(stderr, "# te-gpt --profile: the decode steps, device time per kernel (eager):\n");
      fflush(stderr);
      GPT_CHECK(tecore_profile_report(2, NULL));
    }
    if (!o.sample_check) {
      /* the prompt's tokens and each new one run through the decode step
       * one at a time (batch 1, the KV cache), each new one read back;
       * steady: from the third step on (the first is eager, the second
       * captures the graph) */
      size_t ntok = (o.prompt[0] ? strlen(o.prompt) : 1) + (size_t)o.sample;
      double rate = (double)ntok / sdt, srate = steady > 0 && ntok > 2 ? (ntok - 2) / (s1 - steady) : 0;
      te_out_note(&OUT, "sample: %zu decode steps (batch 1, KV cache%s) in %.1f ms: %.0f tokens/s; "
                  "%.0f tokens/s after the first two", ntok,
                  o.no_graph ? ", eager" : ", one graph", sdt * 1e3, rate, srate);
      te_out_field_n(&OUT, "decode_tokens_per_s", rate);
      te_out_field_n(&OUT, "decode_steady_tokens_per_s", srate);
    }
    if (o.sample_check) {
      double lim = GPT_KV_TOL * (big > 1 ? big : 1);
      te_out_note(&OUT, "KV-cache decode vs the whole model: logits differ by %.4g at most "
                  "(largest |logit| %.3g, limit %.3g)", diff, big, lim);
      te_out_field_n(&OUT, "kv_check_diff", diff);
      if (!(diff <= lim)) {
        GPT_ERR("--sample-check: the KV-cache logits differ from the whole model's by %g "
                "(limit %g)", diff, lim);
        rc = TE_EXIT_FAIL;
      }
    }
    /* printed as bytes (a NUL as '?'); JSON gets ASCII: other bytes '?' */
    char *ascii = gpt_xalloc((size_t)o.sample + 1);
    for (int i = 0; i < o.sample; i++) {
      unsigned char b = (unsigned char)text[i];
      if (!b) text[i] = '?';
      ascii[i] = b && b < 0x80 ? (char)b : '?';
    }
    te_out_field_s(&OUT, "sample", ascii);
    /* the greedy choices' margin: a sample that another rounding of the
     * logits (--tp's sums) turns elsewhere had one below that change */
    te_out_field_n(&OUT, "sample_margin", margin);
    FILE *f = OUT.format == TE_OUT_TABLE ? stdout : o.quiet ? NULL : te_out_notes(&OUT);
    if (f) fprintf(f, "%s%s\n", o.prompt, text);
    free(ascii);
    free(text);
  }
  if (o.off.on && !dof.ctx)
    te_out_note(&OUT, "offload: not attached: it attaches after two plain steps of the run");
  if (dof.ctx) {
    te_out_field_n(&OUT, "offload_ring_mib", dof.st.ring_bytes / 1048576.0);
    te_out_field_n(&OUT, "offload_saved_mib",
                   ((double)dof.st.seq_bytes_before - (double)dof.st.seq_bytes_after -
                    (double)dof.st.ring_bytes) / 1048576.0);
  }
  te_out_end(&OUT);
out:
  demo_offload_destroy(&dof);
  gpt_train_free(&t);
  gpt_model_destroy(&m);
  gpt_data_free(&d);
  return rc;
}

/* --tp: the ranks share the page (demo_tp.h: bootstrap, losses) and, made
 * before they fork, the sums of their samples and the area where --save
 * gathers the split tensors' slices (gpt_tp_gather). */
struct tp_shared {
  size_t bytes;                      /* of the mapping */
  uint64_t sample_sum[DEMO_TP_MAX];
  float area[];                      /* gpt_tp_area_bytes (with --save) */
};

struct tp_arg {
  struct opts *o;
  struct demo_tp_page *page;
  struct tp_shared *sh;
};

static int page_barrier(void *page) { return demo_tp_barrier(page); }

static int tp_rank(void *arg, int rank) {
  struct tp_arg *a = arg;
  struct demo_tp t;
  if (demo_tp_init(&t, a->page, a->o->tp, rank)) return TE_EXIT_FAIL;
  struct gpt_tp tp = {.size = a->o->tp, .rank = rank, .ctx = &t.params[DEMO_TP_FUSED],
                      .comm = t.comm, .area = a->sh->area,
                      .area_bytes = a->sh->bytes - sizeof *a->sh, .barrier = page_barrier,
                      .barrier_ctx = a->page};
  if (rank) {   /* rank 0 speaks for all */
    OUT.quiet = 1;
    OUT.f = fopen("/dev/null", "w");
    OUT.format = TE_OUT_TABLE;
    if (!freopen("/dev/null", "w", stdout)) return TE_EXIT_FAIL;
  }
  int rc = run(a->o, &tp, demo_tp_loss(a->page, 0, 0, rank), &a->sh->sample_sum[rank]);
  if (!rc && demo_tp_barrier(a->page)) rc = TE_EXIT_FAIL;
  demo_tp_fini(&t);
  return rc;
}

static struct tp_shared *tp_shared_create(const struct opts *o) {
  size_t bytes = sizeof(struct tp_shared) + (o->save ? gpt_tp_area_bytes(&o->c) : 0);
  /* touched only where a gather writes */
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (p == MAP_FAILED) {
    GPT_ERR("--tp: mmap of %zu bytes: %s", bytes, strerror(errno));
    return NULL;
  }
  struct tp_shared *sh = p;
  sh->bytes = bytes;
  return sh;
}

static int run_tp(struct opts *o) {
  struct tp_arg a = {.o = o, .page = demo_tp_page_create(o->tp, o->steps),
                     .sh = tp_shared_create(o)};
  if (!a.page || !a.sh) {
    demo_tp_page_free(a.page);
    if (a.sh) munmap(a.sh, a.sh->bytes);
    return TE_EXIT_FAIL;
  }
  int rc = demo_tp_fork(o->tp, tp_rank, &a);
  if (rc == 0) {
    /* every rank computed the same replicated loss: the same bits */
    for (int r = 1; r < o->tp; r++)
      if (memcmp(demo_tp_loss(a.page, 0, 0, r), demo_tp_loss(a.page, 0, 0, 0),
                 (size_t)o->steps * sizeof(double))) {
        GPT_ERR("--tp %d: rank %d's losses differ from rank 0's", o->tp, r);
        rc = TE_EXIT_FAIL;
      }
    /* and sampled the same bytes (the same logits, the same draws) */
    for (int r = 1; r < o->tp && o->sample > 0; r++)
      if (a.sh->sample_sum[r] != a.sh->sample_sum[0]) {
        GPT_ERR("--tp %d: rank %d sampled other bytes than rank 0", o->tp, r);
        rc = TE_EXIT_FAIL;
      }
    if (!rc && !o->quiet && OUT.format == TE_OUT_TABLE)
      printf("# --tp %d: the losses%s are the same bits on every rank\n", o->tp,
             o->sample > 0 ? " and the sample" : "");
  }
  demo_tp_page_free(a.page);
  munmap(a.sh, a.sh->bytes);
  return rc;
}

/* The options into o, defaults resolved: -1 to run, else the exit status
 * (--help, --version, a bad option). */
static int parse(struct opts *o, int argc, char **argv) {
  struct te_cli cli = {.prog = "te-gpt", .usage = usage_text, .shorts = "qh", .longs = longs,
                       .out = &OUT};
  int opt;
  while ((opt = te_cli_next(&cli, argc, argv)) != -1) {
    if (opt == TE_CLI_EXIT) return cli.status;
    if (take(&cli, o, opt, optarg)) return cli.status;
  }
  if (te_cli_end(&cli, argc, argv)) return cli.status;
  struct gpt_config given = o->c;
  if (resolve(&cli, o, given, &o->batch)) return cli.status;
  if (o->tp > 1 && o->load) {
    /* the ranks take the checkpoint's shape: it must split n ways */
    char from[4200];
    snprintf(from, sizeof from, " (the shape of the checkpoint %s)", o->load);
    if (gpt_load_config(o->load, &o->c)) return TE_EXIT_FAIL;
    if (tp_misfit(&cli, o->tp, &o->c, from)) return cli.status;
  }
  if (o->decay_steps <= 0) o->decay_steps = o->steps > 0 ? o->steps : 1;
  if (o->warmup < 0) o->warmup = o->decay_steps / 10;
  if (o->min_lr < 0) o->min_lr = o->lr / 10;
  o->quiet = cli.quiet;
  return -1;
}

int main(int argc, char **argv) {
  struct opts o = {.model = "tiny", .steps = 30, .accum = 1, .lr = -1, .min_lr = -1,
                   .warmup = -1, .wd = 0.1, .clip = 1.0, .seed = 1, .eval_every = 10,
                   .eval_batches = 4, .sample = 64, .prompt = "", .share_saved = 1};
  o.files = calloc((size_t)argc + 1, sizeof *o.files);
  if (!o.files) {
    fprintf(stderr, "te-gpt: out of memory\n");
    return 1;
  }
  int rc = parse(&o, argc, argv);
  if (rc < 0) rc = o.tp > 1 ? run_tp(&o) : run(&o, NULL, NULL, NULL);
  free(o.files);
  return rc;
}
