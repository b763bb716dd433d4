/* SPDX-License-Identifier: Apache-2.0 */
/* te-gpt -- libte's main job: trains a GPT- or Llama-style transformer
 * from C on bytes (vocabulary 256; by default libte's own man pages, so it
 * runs anywhere with nothing to download) or token shards
 * (tools/gpt/gpt_shard.c), then samples text from it; --eval scores a
 * file (gpt_eval.c), --save-hf/--load-hf speak GPT-2's and Llama's Hugging
 * Face layouts (gpt_hf.c, gpt_hf_llama.c).
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
#include "gpt/gpt_bpe.h"
#ifdef TE_HAVE_MPI
#include <mpi.h>
#include <te/comm_mpi.h>
#endif

struct preset {
  const char *name;
  struct gpt_config c;
  int batch;
  double lr;
};
/* layers, hidden, heads, kv_heads, ffn, seq, vocab, norm, act, rope, bias (share_saved,
 * wgrad_bf16, gelu_apart, recompute: the run's options, set later), rope_theta */
static const struct preset presets[] = {
    {"tiny", {2, 64, 4, 4, 256, 64, 256, GPT_LAYERNORM, GPT_GELU, 1, 1, 0, 0, 0, 0, 0}, 4, 1e-2},
    {"gpt2-124m", {12, 768, 12, 12, 3072, 1024, 50304, GPT_LAYERNORM, GPT_GELU, 0, 1, 0, 0, 0, 0, 0}, 8, 6e-4},
    {"gpt2-350m", {24, 1024, 16, 16, 4096, 1024, 50304, GPT_LAYERNORM, GPT_GELU, 0, 1, 0, 0, 0, 0, 0}, 8, 6e-4},
    {"gpt-1.3b", {24, 2048, 16, 16, 8192, 2048, 50304, GPT_LAYERNORM, GPT_GELU, 0, 1, 0, 0, 0, 0, 0}, 8, 6e-4},
    {"llama-1b", {16, 2048, 32, 8, 8192, 2048, 128256, GPT_RMSNORM, GPT_SWIGLU, 1, 0, 0, 0, 0, 0, 0}, 4, 3e-4},
    {"llama3-8b", {32, 4096, 32, 8, 14336, 8192, 128256, GPT_RMSNORM, GPT_SWIGLU, 1, 0, 0, 0, 0, 0, 500000.0f}, 1, 3e-4},
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
    "  trains a GPT/Llama-style transformer on bytes or token shards (default: libte's\n"
    "  man pages), then samples text; a row per step: loss, validation loss, ms,\n"
    "  tokens/s, TFLOP/s, memory\n"
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
    "  --data FILE        train on FILE's bytes, or its tokens when it is an llm.c shard\n"
    "                     (repeat for more files); the last tenth is held out for the\n"
    "                     validation loss\n"
    "  --corpus-dir DIR   without --data: the man pages under DIR (man1, man3, man7)\n"
    "  --synthetic        random tokens at any vocabulary (speed runs)\n"
    "  --val FILE         the validation set (bytes or a shard; default: the last tenth)\n"
    "  --tokenize IN OUT  write IN's bytes (or --tokenizer's ids) as an llm.c token shard\n"
    "                     OUT, and exit\n"
    "  --tokenizer FILE   a byte-level BPE tokenizer (tokenizer.json, or vocab.json with\n"
    "                     merges.txt beside it): --data, --val and --eval text read as its\n"
    "                     ids, --tokenize writes them, --sample decoded through it; --save\n"
    "                     and --save-hf copy it, --load and --load-hf use their copy\n"
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
    "  --tp N             tensor parallelism over N = 1..8 ranks (forked processes): every\n"
    "                     block split, the rest replicated; --save writes the one-process\n"
    "                     files, --load takes any run's, every rank decodes --sample,\n"
    "                     rank 0 prints\n"
    "  --sp               with --tp: sequence parallelism: each rank's norms, residuals,\n"
    "                     LM head and loss on its batch x seq / N tokens, an all-gather\n"
    "                     before the QKV and fc1 Linears and a reduce-scatter after the\n"
    "                     output Linear and fc2 in place of the allreduces\n"
    "  --dp N             data parallelism over N ranks (forked processes): each trains on\n"
    "                     its slice of the global batch (dp x batch x accum sequences, the\n"
    "                     ones a single process of --batch dp x batch draws), the gradients\n"
    "                     reduced in buckets during the backward; with --tp T, dp x T ranks\n"
    "  --zero 0|1|2|3     with --dp: 0 every rank steps every parameter (default); 1 AdamW's\n"
    "                     masters and moments sharded over the ranks, the updated\n"
    "                     parameters gathered; 2 the gradients reduce-scattered too; 3\n"
    "                     the blocks' values sharded too, each layer's gathered before\n"
    "                     its forward and its backward (not with --tp or --sample)\n"
    "  --grad-shards 0|1  with --zero 2, 3: each layer's gradients reduce-scattered out of a\n"
    "                     ring of two layers into this rank's shard, no whole gradient\n"
    "                     kept (1, the default; not with --sp); 0 whole gradient buffers\n"
    "  --table-shards 0|1 with --zero 2, 3: each rank holds 1 / dp of the token table and\n"
    "                     its gradient, the tokens' rows moved instead (1, the default;\n"
    "                     not with --tp); 0 the whole table on every rank\n"
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
    "  --eval FILE        no training: the loss and perplexity over FILE's windows\n"
    "  --log FILE         the step rows also appended to FILE\n"
    "checkpoints (safetensors):\n"
    "  --save DIR         after the last step: DIR/model.safetensors, DIR/optimizer.safetensors\n"
    "  --save-every N     also every N steps (needs --save)\n"
    "  --save-hf DIR      also Hugging Face's layout (GPT-2's, or Llama's with RoPE):\n"
    "                     DIR/model.safetensors, config.json (and tokenizer.json)\n"
    "  --load-hf DIR      start from a Hugging Face GPT-2 or Llama checkpoint (its shape;\n"
    "                     step 0)\n"
    "  --load DIR         resume from DIR (its model shape and its run's options, those\n"
    "                     given again excepted; the run continues at its step)\n"
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
  O_OFF_PREFETCH, O_OFF_DIR, O_HOST_BUDGET, O_OFF_MIN, O_GLAUNCH, O_NOPIPE, O_DP, O_ZERO, O_GSHARDS, O_TSHARDS,
  O_VAL, O_TOKENIZE, O_EVALFILE, O_SAVE_EVERY, O_LOG, O_LOAD_HF, O_SAVE_HF, O_RECOMP,
  O_TOKENIZER, O_SP
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
    {"dp", required_argument, 0, O_DP}, {"zero", required_argument, 0, O_ZERO},
    {"grad-shards", required_argument, 0, O_GSHARDS},
    {"table-shards", required_argument, 0, O_TSHARDS},
    {"val", required_argument, 0, O_VAL}, {"tokenize", required_argument, 0, O_TOKENIZE},
    {"eval", required_argument, 0, O_EVALFILE}, {"save-every", required_argument, 0, O_SAVE_EVERY},
    {"log", required_argument, 0, O_LOG}, {"load-hf", required_argument, 0, O_LOAD_HF},
    {"save-hf", required_argument, 0, O_SAVE_HF},
    {"recompute", required_argument, 0, O_RECOMP},
    {"tokenizer", required_argument, 0, O_TOKENIZER}, {"sp", no_argument, 0, O_SP},
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
  int dp, zero;      /* --dp, --zero */
  int grad_shards;   /* --grad-shards */
  int table_shards;  /* --table-shards */
  int sp;            /* --sp */
  double lr, min_lr, wd, clip, temperature;
  long long seed;
  struct demo_offload_opts off;   /* --offload and its options */
  int off_given;                  /* an --offload-* option or --host-budget was given */
  const char *val, *tokenize, *tokenize_out, *eval_file, *log, *load_hf, *save_hf;
  const char *tokenizer;          /* --tokenizer, or the checkpoint's (tok_path) */
  char *tok_path;                 /* --load's or --load-hf's tokenizer (ckpt_tokenizer) */
  int save_every;
  struct gpt_run_args run_args;   /* the options that define the run (--save stores them) */
  int pass;                       /* parse: 0 the command line, 1 the checkpoint's, 2 again */
  char **words;                   /* the checkpoint's options (nwords), which o points into */
  int nwords;
  int stored_data;                /* the checkpoint gave --data */
};

static int word_of(struct te_cli *cli, const char *flag, const char *arg, const char *const *w,
                   int n, int *out) {
  for (int i = 0; i < n; i++)
    if (!strcmp(arg, w[i])) return *out = i, 0;
  return te_cli_error(cli, "%s: unknown value '%s'", flag, arg);
}

/* The options a checkpoint keeps (te-gpt(1), "Checkpoints"): the model,
 * the data and the training, not where files go nor what is printed. */
static int run_option(int opt) {
  return (opt >= O_MODEL && opt <= O_EVALB) || opt == O_SHARE || opt == O_WGRAD ||
         opt == O_VAL || opt == O_SAVE_EVERY;
}

/* The checkpoint's words (pass 1) are run options only; a --data given
 * again (pass 2) replaces every stored one. */
static int record(struct te_cli *cli, struct opts *o, int opt, const char *name) {
  if (o->pass == 1 && !run_option(opt))
    return te_cli_error(cli, "%s: the checkpoint's options hold --%s, not an option a run "
                        "stores", o->load, name ? name : "?");
  if (opt == O_DATA && o->pass == 1) o->stored_data = 1;
  if (opt == O_DATA && o->pass == 2 && o->stored_data) o->nfiles = 0, o->stored_data = 0;
  return 0;
}

/* The run's settings, resolved, as the words its checkpoint stores: the
 * same run gives the same words however its options were spelled. */
static void record_run(struct opts *o) {
  struct gpt_run_args *a = &o->run_args;
  char v[64];
#define GPT_RUN_NUM(name, fmt, x) (snprintf(v, sizeof v, fmt, x), gpt_run_args_add(a, name, v))
  for (int i = 0; i < o->nfiles; i++) gpt_run_args_add(a, "data", o->files[i]);
  if (o->corpus_dir) gpt_run_args_add(a, "corpus-dir", o->corpus_dir);
  if (o->synthetic) gpt_run_args_add(a, "synthetic", NULL);
  if (o->val) gpt_run_args_add(a, "val", o->val);
  GPT_RUN_NUM("steps", "%d", o->steps);
  GPT_RUN_NUM("batch", "%d", o->batch);
  GPT_RUN_NUM("accum", "%d", o->accum);
  GPT_RUN_NUM("lr", "%.17g", o->lr);
  GPT_RUN_NUM("min-lr", "%.17g", o->min_lr);
  GPT_RUN_NUM("warmup", "%d", o->warmup);
  GPT_RUN_NUM("decay-steps", "%d", o->decay_steps);
  GPT_RUN_NUM("weight-decay", "%.17g", o->wd);
  GPT_RUN_NUM("clip", "%.17g", o->clip);
  gpt_run_args_add(a, "recipe", recipe_words[o->recipe]);
  GPT_RUN_NUM("seed", "%lld", o->seed);
  GPT_RUN_NUM("eval-every", "%d", o->eval_every);
  GPT_RUN_NUM("eval-batches", "%d", o->eval_batches);
  GPT_RUN_NUM("share-saved", "%d", o->share_saved);
  gpt_run_args_add(a, "wgrad", wgrad_words[o->wgrad]);
  if (o->save_every) GPT_RUN_NUM("save-every", "%d", o->save_every);
#undef GPT_RUN_NUM
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
  if (record(cli, o, opt, flag)) return TE_EXIT_USAGE;
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
  case O_DATA:
    o->files = realloc(o->files, ((size_t)o->nfiles + 2) * sizeof *o->files);
    if (!o->files) return te_cli_error(cli, "out of memory");
    o->files[o->nfiles++] = (char *)a;
    return 0;
  case O_VAL: o->val = a; return 0;
  case O_TOKENIZE: o->tokenize = a; return 0;
  case O_TOKENIZER: o->tokenizer = a; return 0;
  case O_EVALFILE: o->eval_file = a; return 0;
  case O_LOG: o->log = a; return 0;
  case O_LOAD_HF: o->load_hf = a; return 0;
  case O_SAVE_HF: o->save_hf = a; return 0;
  case O_SAVE_EVERY: return te_cli_int(cli, f, a, 1, 100000000, &o->save_every);

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
  case O_SP: o->sp = 1; return 0;
  case O_DP: return te_cli_int(cli, f, a, 1, DEMO_TP_MAX, &o->dp);
  case O_ZERO: return te_cli_int(cli, f, a, 0, 3, &o->zero);
  case O_GSHARDS: return te_cli_int(cli, f, a, 0, 1, &o->grad_shards);
  case O_TSHARDS: return te_cli_int(cli, f, a, 0, 1, &o->table_shards);
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

/* --sp's rules: with --tp, the tokens of a microbatch split over its
 * ranks (each its block of rows) */
static int sp_misfit(struct te_cli *cli, const struct opts *o, int batch, const char *from) {
  if (!o->sp) return 0;
  if (o->tp < 2) return te_cli_error(cli, "--sp needs --tp 2 or more (it splits the tokens over "
                                          "the tensor-parallel ranks)");
  long tokens = (long)batch * o->c.seq;
  if (tokens % o->tp)
    return te_cli_error(cli, "--tp %d --sp splits a microbatch's --batch %d x --seq %d = %ld "
                        "tokens over the ranks: it must be a multiple of %d%s", o->tp, batch,
                        o->c.seq, tokens, o->tp, from);
  return 0;
}

/* --dp's rules: the ranks fit, --zero needs it; offload's pass hooks
 * and the group's are one set a sequence */
static int dp_misfit(struct te_cli *cli, const struct opts *o) {
  int dp = o->dp > 0 ? o->dp : 1, tp = o->tp > 0 ? o->tp : 1;
  if (dp * tp > DEMO_TP_MAX)
    return te_cli_error(cli, "--dp %d x --tp %d: at most %d ranks", dp, tp, DEMO_TP_MAX);
  if (o->zero && dp < 2) return te_cli_error(cli, "--zero %d needs --dp 2 or more", o->zero);
  if (o->off.on && dp > 1) return te_cli_error(cli, "--offload and --dp: one or the other");
  /* the values are shards between the passes: nothing whole to decode */
  if (o->zero == 3 && o->sample_given && o->sample > 0)
    return te_cli_error(cli, "--zero 3 and --sample: not together (--save, then --sample "
                        "with --load in one process)");
  return 0;
}

/* a count of the environment's: its value, or -1 when unset or not one */
static int env_int(const char *name) {
  const char *v = getenv(name);
  char *end;
  long x = v && *v ? strtol(v, &end, 10) : -1;
  return v && *v && !*end && x >= 0 && x <= 1048576 ? (int)x : -1;
}

static int under_mpi(void) {
#ifdef TE_HAVE_MPI
  return getenv("OMPI_COMM_WORLD_RANK") || getenv("PMI_RANK") || getenv("PMIX_RANK");
#else
  return 0;
#endif
}

/* this process one rank of several by its launcher (struct launch) */
static int launched(void) {
  return getenv("TECOMM_RANK") || under_mpi() || env_int("SLURM_NTASKS") > 1;
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
  if (o->val && o->synthetic) return te_cli_error(cli, "--val and --synthetic: one or the other");
  if (o->save_every && !o->save) return te_cli_error(cli, "--save-every needs --save DIR");
  if (o->load_hf && o->load) return te_cli_error(cli, "--load and --load-hf: one or the other");
  if (o->top_k && o->temperature <= 0) return te_cli_error(cli, "--top-k needs --temperature > 0");
  if (o->off_given && !o->off.on)
    return te_cli_error(cli, "--offload-layers, --offload-prefetch, --offload-min-elems, "
                             "--offload-dir and --host-budget need --offload");
  if (o->off.on && o->tp > 1) return te_cli_error(cli, "--offload and --tp: one or the other");
  if (dp_misfit(cli, o)) return TE_EXIT_USAGE;
  if (launched() && o->tp > 1 && (o->save || o->save_hf))
    return te_cli_error(cli, "--tp with --save or --save-hf: not when launched by mpirun, srun or "
                             "TECOMM_RANK (the slices meet in memory the forked ranks share)");
  if (o->off.on && o->c.recompute)
    return te_cli_error(cli, "--offload and --recompute: one or the other");
  /* --tp with --load or --load-hf: the checkpoint's shape, checked by parse */
  if (o->tp > 1 && !o->load && !o->load_hf && tp_misfit(cli, o->tp, c, "")) return TE_EXIT_USAGE;
  /* with --load or --load-hf the tokens are counted on the checkpoint's --seq (parse) */
  if (sp_misfit(cli, o, o->load || o->load_hf ? 0 : *batch, "")) return TE_EXIT_USAGE;
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

/* --dp: the group over the model (before gpt_train_init, which shards
 * AdamW's state by it); the loss scale 1 / (accum * dp), so that the
 * summed gradients are one process's mean over the global batch. */
static void dp_attach(struct gpt_model *m, const struct gpt_dp *dp,
                      const struct tecore_recipe *recipe, int accum, tecore_stream_t s) {
  m->dp = *dp;
  /* --sp: each rank's loss is over its 1 / tp of the rows */
  float dl = 1.0f / (float)(accum * dp->size * (m->tp.sp ? m->tp.size : 1));
  GPT_CHECK(tecore_memcpy(m->dloss, (tecore_devptr_t)(uintptr_t)&dl, 4));
  gpt_dp_create(m, recipe, s);
  char line[512];
  gpt_dp_summary(m, line, sizeof line);
  te_out_note(&OUT, "dp: %s", line);
}

/* FNV-1a of the sampled bytes: --tp compares the ranks' samples */
static uint64_t text_sum(const char *text, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)text[i]) * 0x100000001b3ull;
  return h;
}

/* The GELU in the GEMMs' epilogues where libte's own GEMM runs them (BF16
 * on compute capability 9.0, TECORE_GEMM_OWN: GPT-2 124M's step 1.6 ms
 * faster than with the GELU apart, bench/2026-11-26.md, session 29), as its own
 * kernels elsewhere (cuBLASLt's epilogues made that step 4.4% slower,
 * bench/2026-11-23.md, session 13): the sequence's flag
 * TECORE_SEQ_NO_GELU_EPILOGUE (TECORE_OPS_GELU_EPILOGUE=0 turns the
 * epilogue off everywhere). */
static void gelu_choice(struct opts *o) {
  tecore_backend_t be;
  struct tecore_device_props pr;
  int own = !o->recipe && tecore_backend(&be) == TECORE_SUCCESS && be == TECORE_BACKEND_CUDA &&
            tecore_device_get_props(0, &pr) == TECORE_SUCCESS && pr.cc_major == 9 &&
            pr.cc_minor == 0;
  o->c.gelu_apart = !own;
}

/* One training run's state, phase to phase (run() below). */
enum { GPT_MEDIAN_STEPS = 1024 };
struct run_state {
  struct opts o;
  const struct gpt_tp *tp;     /* --tp: this rank's place; NULL: one process */
  const struct gpt_dp *dp;     /* --dp: likewise */
  void *world;                 /* the communicator of every rank, or NULL */
  double *losses;              /* --tp, --dp: this rank's losses, for the parent */
  uint64_t *sample_sum;
  tecore_stream_t s;
  struct gpt_data d;
  struct tecore_recipe rec, *recipe;
  struct gpt_model m;
  struct gpt_train t;
  struct demo_offload dof;
  struct gpt_log lg;           /* --log */
  int have_data, have_model;   /* what run_free frees */
  size_t shared, arenas, whole;
  double mem_mib, flops_per_token, tokens;
  /* the step loop's */
  double first, last, last_val, tsum, plain_ms;
  double t_start;              /* now_s() as the step loop began: the progress line's */
  int nsteps;
  /* the steady steps' times for the median: from this run's third step
   * (the first two make the lazy choices and capture the graph; a run
   * resumed from --load counts from its own first), the last
   * GPT_MEDIAN_STEPS of them; runs of fewer than three steps, all */
  double ring[GPT_MEDIAN_STEPS];
  int nring, first_steady;
  long long ring_from;
};

/* The recipe of --recipe (NULL: BF16); every rank quantizes alike: the
 * amaxes of all of them (--tp, --dp) are reduced. */
static void run_recipe(struct run_state *r) {
  static const tecore_recipe_kind_t kinds[] = {TECORE_RECIPE_DELAYED, TECORE_RECIPE_DELAYED,
                                               TECORE_RECIPE_CURRENT, TECORE_RECIPE_BLOCK};
  r->recipe = NULL;
  if (!r->o.recipe) return;
  GPT_CHECK(tecore_recipe_init(&r->rec, kinds[r->o.recipe]));
  if (kinds[r->o.recipe] == TECORE_RECIPE_DELAYED) r->rec.margin = 1;
  if (r->world) r->rec.amax_reduce = tecomm_amax_reduce, r->rec.amax_reduce_ctx = r->world;
  r->recipe = &r->rec;
}

/* Setup: the device, the data, the model (--dp: its group), AdamW, a
 * checkpoint.  TE_EXIT_OK or the exit status. */
static int run_setup(struct run_state *r) {
  struct opts *o = &r->o;
  GPT_CHECK(tecore_init());
  gelu_choice(o);
  GPT_CHECK(tecore_stream_create(0, 0, &r->s));
  if (o->load && gpt_load_config(o->load, &o->c)) return TE_EXIT_FAIL;
  if (o->load_hf && gpt_hf_config(o->load_hf, &o->c)) return TE_EXIT_FAIL;
  /* --eval reads no training data */
  if (!o->eval_file && gpt_data_load(&r->d, &(struct gpt_data_opts){.files = o->files,
                                         .nfiles = o->nfiles, .corpus_dir = o->corpus_dir,
                                         .val = o->val, .seq = o->c.seq, .vocab = o->c.vocab,
                                         .tokenizer = o->tokenizer,
                                         .synthetic = o->synthetic}))
    return TE_EXIT_FAIL;
  r->have_data = !o->eval_file;
  run_recipe(r);
  struct gpt_model *m = &r->m;
  o->c.share_saved = o->share_saved;
  o->c.wgrad_bf16 = o->wgrad == 1 || (o->wgrad == 0 && o->accum == 1);
  gpt_model_create_dp(m, &o->c, (size_t)o->batch, o->accum, r->recipe, (uint64_t)o->seed,
                      &(struct gpt_ranks){.tp = r->tp, .dp = r->dp}, r->s);
  r->have_model = 1;
  if (r->dp) dp_attach(m, r->dp, r->recipe, o->accum, r->s);
  if (o->share_saved) gpt_share_saved(m, &r->shared, &r->arenas);
  r->t = (struct gpt_train){.lr = o->lr, .min_lr = o->min_lr, .wd = o->wd, .beta1 = 0.9,
                            .beta2 = 0.95, .eps = 1e-8, .clip = o->clip, .warmup = o->warmup,
                            .decay_steps = o->decay_steps, .accum = o->accum,
                            .rng = (uint64_t)o->seed * 0x2545f4914f6cdd1dull + 0x6461746101ull,
                            .use_graph = !o->no_graph,
                            /* offload's copies overlap kernels only from the host */
                            .host_launch = o->host_launch || (o->off.on && !o->launch_given),
                            .pipeline = !o->no_pipeline && !o->off.on,
                            .chain_mode = !o->no_chain && !o->off.on,
                            .sum_ranks = r->tp ? sum_ranks : NULL, .run_args = &o->run_args,
                            .tokenizer = o->tokenizer};
  gpt_train_init(&r->t, m, r->s);
  if (o->off.on) r->t.use_graph = 0;   /* plain eager steps until offload is attached */
  if (o->load && gpt_load(o->load, m, &r->t, r->s)) return TE_EXIT_FAIL;
  if (o->load_hf && gpt_hf_load(o->load_hf, m, r->s)) return TE_EXIT_FAIL;
  int speaks = !r->tp && !r->dp ? 1 : (!r->tp || !r->tp->rank) && (!r->dp || !r->dp->rank);
  if (gpt_log_open(&r->lg, speaks ? o->log : NULL)) return TE_EXIT_FAIL;
  return TE_EXIT_OK;
}

/* The figures the rows and notes use: memory, parameters (--tp: every
 * rank's slices), the model FLOPs a token, the tokens a step. */
static void run_figures(struct run_state *r) {
  const struct gpt_model *m = &r->m;
  size_t seq_total = 0;
  GPT_CHECK(tecore_seq_memory(m->seq, NULL, &seq_total));
  r->mem_mib = (double)(seq_total + m->dev_bytes + gpt_dp_value_bytes(m) + gpt_dp_grad_bytes(m) +
                       gpt_dp_table_bytes(m)) / 1048576.0;
  const struct gpt_config *c = &m->c;
  /* N: every parameter but the embedding tables (lookups, no GEMM) */
  size_t ntab = (size_t)c->vocab * c->hidden + (c->rope ? 0 : (size_t)c->seq * c->hidden);
  r->whole = m->nparams;   /* --tp: the other ranks' slices too */
  for (size_t i = 0; i < m->np && r->tp; i++)
    if (m->p[i].sharded && !strstr(m->p[i].name, "proj.bias") &&
        !strstr(m->p[i].name, "fc2.bias"))
      r->whole += (size_t)(r->tp->size - 1) * m->p[i].rows * m->p[i].cols;   /* those two: rank 0 */
  r->flops_per_token = 6.0 * (double)(r->whole - ntab) +
                       6.0 * c->layers * (double)c->hidden * c->seq;
  r->tokens = (double)m->rows * r->o.accum * (r->dp ? r->dp->size : 1);   /* every rank's */
}

/* Where the device memory goes, and the fuser's plans (--plan). */
static void run_memory_notes(struct run_state *r) {
  const struct gpt_model *m = &r->m;
  struct gpt_mem gm;
  gpt_mem_count(m, &r->t, &gm);
  const double Mi = 1048576.0;
  te_out_note(&OUT, "device memory %.1f MiB: parameters %.1f, their gradients %.1f, AdamW's "
              "masters and moments %.1f, embedding tables and gradients %.1f, saved for the "
              "backward %.1f, other saved tensors %.1f, FP8 copies and workspaces %.1f, "
              "logits %.1f, the rest %.1f", gm.total / Mi, gm.params / Mi, gm.grads / Mi,
              gm.optim / Mi, gm.tables / Mi, gm.saved_back / Mi, gm.saved_other / Mi,
              gm.fp8_other / Mi, gm.logits / Mi, gm.rest / Mi);
  if (r->o.plan) {
    if (m->dlogits8)
      te_out_note(&OUT, "plan: cross-entropy backward -> the LM head's FP8 gradient%s",
                  m->dlogits8 == 2 ? ", over the logits" : "");
    for (int k = 0; k < 2; k++) {
      char *pl = gpt_describe(m, k ? TECORE_SEQ_BACKWARD : TECORE_SEQ_FORWARD);
      te_out_note(&OUT, "plan %s", pl);
      te_out_field_s(&OUT, k ? "plan_backward" : "plan_forward", pl);
      free(pl);
    }
  }
  te_out_field_n(&OUT, "mem_saved_back_mib", gm.saved_back / Mi);
  te_out_field_n(&OUT, "dlogits_fp8", m->dlogits8);
  te_out_field_n(&OUT, "mem_fp8_other_mib", gm.fp8_other / Mi);
}

/* The notes before the first row: model, data, training, memory. */
static void run_notes(struct run_state *r) {
  const struct opts *o = &r->o;
  const struct gpt_config *c = &r->m.c;
  te_out_begin(&OUT);
  te_out_note(&OUT, "te-gpt: %s: %d layers, hidden %d, %d heads (%d kv), ffn %d, seq %d, vocab %d, "
              "%s, %s, %s, LM head untied; %.2fM parameters", o->load ? "loaded" : o->model,
              c->layers, c->hidden, c->heads, c->kv_heads, c->ffn, c->seq, c->vocab,
              norm_words[c->norm], act_words[c->act], c->rope ? "RoPE" : "learned positions",
              (double)r->whole / 1e6);
  te_out_note(&OUT, "data: %s; %zu training tokens, %zu held out", r->d.source, r->d.ntrain,
              r->d.n - r->d.ntrain);
  te_out_note(&OUT, "%s, batch %d x %d tokens x accum %d; AdamW lr %g (warmup %d, cosine to %g at "
              "step %d), weight decay %g, clip %g; %s",
              o->recipe ? recipe_words[o->recipe] : "BF16", o->batch, c->seq, o->accum, o->lr,
              o->warmup, o->min_lr, o->decay_steps, o->wd, o->clip,
              o->no_graph ? "eager launches" : "the whole step one graph from the second step");
  if (o->share_saved)
    te_out_note(&OUT, "saved tensors the backward never reads: %.1f MiB laid over %.1f MiB of "
                "shared scratch", (double)r->shared / 1048576.0, (double)r->arenas / 1048576.0);
  run_memory_notes(r);
  te_out_field_s(&OUT, "model", o->load ? "loaded" : o->model);
  te_out_field_n(&OUT, "saved_shared_mib", (double)r->shared / 1048576.0);
  te_out_field_n(&OUT, "parameters", (double)r->whole);
}

/* --offload: attached after two plain steps (or before the first with a
 * given prefetch, so a model that fits only with offload runs at all). */
static void run_offload_maybe(struct run_state *r) {
  const struct opts *o = &r->o;
  if (!o->off.on || r->dof.ctx || !(r->nsteps == 2 || o->off.prefetch > 0)) return;
  GPT_CHECK(tecore_stream_synchronize(r->s));
  offload_attach(&r->dof, &r->o, &r->m, r->plain_ms, (long long)r->t.step);
  size_t after = 0;
  GPT_CHECK(tecore_seq_memory(r->m.seq, NULL, &after));
  r->mem_mib = (double)(after + r->m.dev_bytes + r->dof.st.ring_bytes) / 1048576.0;
  r->t.use_graph = !o->no_graph;
  r->t.eager_steps = 0;   /* one eager step with offload, then the capture */
}

/* A step's loss and time into the run's figures. */
static void run_account(struct run_state *r, double loss, double dt) {
  if (r->nsteps == 1) r->plain_ms = dt * 1e3;   /* the second plain step: lazy choices made */
  if (isnan(r->first)) r->first = loss;
  if (r->losses && r->t.step <= r->o.steps) r->losses[r->t.step - 1] = loss;
  r->last = loss;
  r->tsum += dt, r->nsteps++;
  if (r->nsteps >= r->first_steady) {
    if (r->nring == GPT_MEDIAN_STEPS) r->ring_from++;
    else if (!r->nring) r->ring_from = r->t.step;
    r->ring[(r->nsteps - r->first_steady) % GPT_MEDIAN_STEPS] = dt;
    if (r->nring < GPT_MEDIAN_STEPS) r->nring++;
  }
}

/* The time the steps left take at the median step so far (the steady
 * steps', else every step's mean): the ETA.  A copy is sorted, so the
 * ring keeps its order. */
static double run_eta(const struct run_state *r) {
  double v[GPT_MEDIAN_STEPS];
  memcpy(v, r->ring, (size_t)r->nring * sizeof v[0]);
  double med = r->nring ? gpt_median(v, (size_t)r->nring) : r->tsum / (r->nsteps ? r->nsteps : 1);
  return med * (double)(r->o.steps - (long long)r->t.step);
}

/* After a step's row: the progress line on a terminal (elapsed, ETA,
 * tokens/s at the median), and the same figures in the --log row. */
static void run_progress(struct run_state *r, double loss, struct te_out_val val, double lr,
                         double gn, double dt) {
  double elapsed = now_s() - r->t_start, eta = run_eta(r);
  double med = r->o.steps > r->t.step ? eta / (double)(r->o.steps - (long long)r->t.step) : dt;
  te_out_progress(&OUT, "step %lld/%d, %.1f s elapsed, ETA %.1f s (%.1f ms/step, the median), "
                  "%.0f tokens/s", (long long)r->t.step, r->o.steps, elapsed, eta, med * 1e3,
                  r->tokens / med);
  gpt_log_step(&r->lg, &(struct gpt_log_row){r->t.step, loss, val.set ? val.n : NAN, lr, gn,
                                              dt * 1e3, r->tokens / dt, elapsed, eta});
}

/* One step and its row: TE_EXIT_OK or TE_EXIT_FAIL (said why). */
static int run_one_step(struct run_state *r) {
  const struct opts *o = &r->o;
  struct gpt_train *t = &r->t;
  run_offload_maybe(r);
  double t0 = now_s(), gn = 0;
  double lr = gpt_lr_at(t, t->step + 1);
  /* step 1 makes the lazy choices, measuring GEMM algorithms among them:
   * on an H100 the step after that ran ~12% slow (clocks recovering),
   * so with three steps or more the third is the one profiled */
  const int pstep = o->steps >= 3 ? 3 : 2;
  int prof = o->profile && t->step + 1 == pstep;
  if (prof) GPT_CHECK(tecore_profile_start());
  /* the next step may be queued before this one is waited for when
   * nothing runs between them (a validation pass, the last step) */
  t->queue_next = t->step + 2 <= o->steps && !(o->eval_every && (t->step + 1) % o->eval_every == 0) &&
                  !(o->save_every && (t->step + 1) % o->save_every == 0);
  double loss = gpt_train_step(t, &r->m, &r->d, r->s, &gn);
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
    GPT_ERR("step %lld: the loss is %g", (long long)t->step, loss);
    return TE_EXIT_FAIL;
  }
  if (r->dof.ctx) demo_offload_check(&r->dof, (int)t->step);
  run_account(r, loss, dt);
  struct te_out_val val = TE_OUT_NONE;
  if (o->eval_every && t->step % o->eval_every == 0) {
    r->last_val = gpt_val_loss(t, &r->m, &r->d, o->eval_batches, r->s);
    /* those forwards have no backward: offload forgets what they saved */
    if (r->dof.ctx && tegraph_offload_reset(r->dof.ctx) != TEGRAPH_SUCCESS) {
      GPT_ERR("--offload: tegraph_offload_reset: %s", tegraph_last_error());
      return TE_EXIT_FAIL;
    }
    val = TE_OUT_N(r->last_val);
  }
  te_out_row(&OUT, (struct te_out_val[]){TE_OUT_N(t->step), TE_OUT_N(loss), val, TE_OUT_N(lr),
                                         TE_OUT_N(gn), TE_OUT_N(dt * 1e3),
                                         TE_OUT_N(r->tokens / dt),
                                         TE_OUT_N(r->tokens / dt * r->flops_per_token / 1e12),
                                         TE_OUT_N(r->mem_mib)});
  run_progress(r, loss, val, lr, gn, dt);
  if (o->save_every && t->step % o->save_every == 0 && t->step < o->steps) {
    if (gpt_save(o->save, &r->m, t, r->s)) return TE_EXIT_FAIL;
    te_out_note(&OUT, "saved step %lld to %s", (long long)t->step, o->save);
  }
  return TE_EXIT_OK;
}

/* The step loop, a row a step. */
static int run_steps(struct run_state *r) {
  te_out_table(&OUT, "steps", step_cols, (int)(sizeof step_cols / sizeof step_cols[0]));
  r->first = r->last = r->last_val = NAN;
  r->first_steady = r->o.steps - (long long)r->t.step >= 3 ? 3 : 1;
  r->t_start = now_s();
  while (r->t.step < r->o.steps)
    if (run_one_step(r) != TE_EXIT_OK) return TE_EXIT_FAIL;
  te_out_progress_clear(&OUT);
  te_out_table_end(&OUT);
  return TE_EXIT_OK;
}

/* After the loop: the losses, the median step, the step graph's launches,
 * --save.  TE_EXIT_OK or TE_EXIT_FAIL. */
static int run_summary(struct run_state *r) {
  const struct gpt_train *t = &r->t;
  if (r->nsteps) {
    const double med = gpt_median(r->ring, (size_t)r->nring);
    te_out_note(&OUT, "loss %.4f -> %.4f over %d steps; %.1f ms/step, %.0f tokens/s (the median "
                "of steps %lld-%lld), %.1f ms/step on average over all", r->first, r->last,
                r->nsteps, med * 1e3, r->tokens / med, r->ring_from,
                r->ring_from + r->nring - 1, r->tsum / r->nsteps * 1e3);
    te_out_field_n(&OUT, "ms_median", med * 1e3);
    te_out_field_n(&OUT, "tokens_per_s_median", r->tokens / med);
    te_out_field_n(&OUT, "median_first_step", (double)r->ring_from);
  }
  if (t->launch_us > 0) {
    char census[128];
    gpt_graph_census(t, census, sizeof census);
    const char *how = t->chain_launches ? "chain" : t->host_launch ? "host" : "device";
    te_out_note(&OUT, "step graph: %s (%s), %s in %.1f us of host time at the least, %.1f us "
                "median over %d launches%s",
                r->tp ? "every microbatch, the norm summed over the ranks, the clipping and AdamW"
                      : "every microbatch, the norm, the clipping and AdamW",
                census, t->chain_launches ? "queued to its launcher on the device (graph chain)"
                : t->host_launch ? "launched from the host" : "launched from the device",
                t->launch_us, gpt_launch_median(t), t->nlaunch, t->chain_note);
    te_out_field_n(&OUT, "graph_launch_us", t->launch_us);
    te_out_field_n(&OUT, "graph_launch_us_median", gpt_launch_median(t));
    te_out_field_s(&OUT, "graph_launch", how);
  }
  te_out_field_n(&OUT, "first_loss", r->first);
  te_out_field_n(&OUT, "last_loss", r->last);
  te_out_field_n(&OUT, "last_val_loss", r->last_val);
  const char *save = r->o.save;
  if (save && gpt_save(save, &r->m, &r->t, r->s)) return TE_EXIT_FAIL;
  if (save) te_out_note(&OUT, "saved step %lld to %s", (long long)t->step, save);
  if (r->o.save_hf && gpt_hf_save(r->o.save_hf, &r->m, r->o.tokenizer, r->s)) return TE_EXIT_FAIL;
  return TE_EXIT_OK;
}

/* The decode's rate, or --sample-check's verdict (TE_EXIT_FAIL past
 * GPT_KV_TOL). */
static int sample_figures(const struct opts *o, double sdt, double s1, double steady,
                          double diff, double big) {
  if (!o->sample_check) {
    /* the prompt's tokens and each new one run through the decode step
     * one at a time (batch 1, the KV cache), each new one read back;
     * steady: from the third step on (the first is eager, the second
     * captures the graph) */
    size_t ntok = (o->prompt[0] ? strlen(o->prompt) : 1) + (size_t)o->sample;
    double rate = (double)ntok / sdt, srate = steady > 0 && ntok > 2 ? (ntok - 2) / (s1 - steady) : 0;
    te_out_note(&OUT, "sample: %zu decode steps (batch 1, KV cache%s) in %.1f ms: %.0f tokens/s; "
                "%.0f tokens/s after the first two", ntok,
                o->no_graph ? ", eager" : ", one graph", sdt * 1e3, rate, srate);
    te_out_field_n(&OUT, "decode_tokens_per_s", rate);
    te_out_field_n(&OUT, "decode_steady_tokens_per_s", srate);
    return TE_EXIT_OK;
  }
  double lim = GPT_KV_TOL * (big > 1 ? big : 1);
  te_out_note(&OUT, "KV-cache decode vs the whole model: logits differ by %.4g at most "
              "(largest |logit| %.3g, limit %.3g)", diff, big, lim);
  te_out_field_n(&OUT, "kv_check_diff", diff);
  if (diff <= lim) return TE_EXIT_OK;
  GPT_ERR("--sample-check: the KV-cache logits differ from the whole model's by %g (limit %g)",
          diff, lim);
  return TE_EXIT_FAIL;
}

/* The sampled bytes (n), printed as bytes (a NUL as '?'); JSON gets
 * ASCII: other bytes '?'. */
static void sample_print(const struct opts *o, char *text, size_t n, double margin) {
  char *ascii = gpt_xalloc(n + 1);
  for (size_t i = 0; i < n; i++) {
    unsigned char b = (unsigned char)text[i];
    if (!b) text[i] = '?';
    ascii[i] = b && b < 0x80 ? (char)b : '?';
  }
  te_out_field_s(&OUT, "sample", ascii);
  /* the greedy choices' margin: a sample that another rounding of the
   * logits (--tp's sums) turns elsewhere had one below that change */
  te_out_field_n(&OUT, "sample_margin", margin);
  FILE *f = OUT.format == TE_OUT_TABLE ? stdout : o->quiet ? NULL : te_out_notes(&OUT);
  if (f) fprintf(f, "%s%s\n", o->prompt, text);
  free(ascii);
}

/* --tokenizer for --sample: the tokenizer, whose vocabulary the model's
 * must hold; *bpe NULL without one.  0 or -1. */
static int sample_tokenizer(const struct opts *o, const struct gpt_model *m, struct gpt_bpe **bpe) {
  *bpe = o->tokenizer ? gpt_bpe_load(o->tokenizer) : NULL;
  if (o->tokenizer && !*bpe) return -1;
  if (*bpe && (*bpe)->vocab > (uint32_t)m->c.vocab) {
    GPT_ERR("--tokenizer %s: %u tokens, more than the model's vocabulary (%d)", o->tokenizer,
            (*bpe)->vocab, m->c.vocab);
    gpt_bpe_free(*bpe);
    return -1;
  }
  return 0;
}

/* the sample's ids as text, replacing *text (*n bytes); 0 or -1 */
static int sample_decode(const struct gpt_bpe *bpe, const uint32_t *ids, int count, char **text,
                         size_t *n) {
  uint8_t *t = gpt_bpe_decode(bpe, ids, (size_t)count, n);
  if (!t) return -1;
  free(*text);
  *text = (char *)t;
  return 0;
}

/* --sample: generation from the trained model.  TE_EXIT_OK or FAIL. */
static int run_sample(struct run_state *r) {
  const struct opts *o = &r->o;
  struct gpt_bpe *bpe;
  if (sample_tokenizer(o, &r->m, &bpe)) return TE_EXIT_FAIL;
  char *text = gpt_xalloc((size_t)o->sample + 1);
  uint32_t *ids = gpt_xalloc((size_t)o->sample * sizeof *ids + 1);
  size_t n = (size_t)o->sample;
  struct gpt_sample_opts so = {.n = o->sample, .top_k = o->top_k, .temperature = o->temperature,
                               .seed = (uint64_t)o->seed, .prompt = o->prompt,
                               .no_graph = o->no_graph, .bpe = bpe, .ids = ids};
  double diff = 0, big = 0, margin = 0;
  so.check = o->sample_check, so.check_diff = &diff, so.check_max = &big, so.margin = &margin;
  double s0 = now_s(), steady = 0;
  so.steady_t0 = &steady;
  if (o->profile) GPT_CHECK(tecore_profile_start());
  int bad = gpt_sample(&r->m, &so, text, r->s) || (bpe && sample_decode(bpe, ids, o->sample, &text, &n));
  gpt_bpe_free(bpe);
  free(ids);
  if (bad) return free(text), TE_EXIT_FAIL;
  if (r->sample_sum) *r->sample_sum = text_sum(text, n);
  double s1 = now_s();
  if (o->profile) {
    GPT_CHECK(tecore_profile_stop());
    fprintf(stderr, "# te-gpt --profile: the decode steps, device time per kernel (eager):\n");
    fflush(stderr);
    GPT_CHECK(tecore_profile_report(2, NULL));
  }
  int rc = sample_figures(o, s1 - s0, s1, steady, diff, big);
  sample_print(o, text, n, margin);
  free(text);
  return rc;
}

/* --offload's figures at the end. */
static void run_offload_notes(const struct run_state *r) {
  if (r->o.off.on && !r->dof.ctx)
    te_out_note(&OUT, "offload: not attached: it attaches after two plain steps of the run");
  if (!r->dof.ctx) return;
  const struct tegraph_offload_stats *st = &r->dof.st;
  te_out_field_n(&OUT, "offload_ring_mib", st->ring_bytes / 1048576.0);
  te_out_field_n(&OUT, "offload_saved_mib",
                 ((double)st->seq_bytes_before - (double)st->seq_bytes_after -
                  (double)st->ring_bytes) / 1048576.0);
}

static void run_free(struct run_state *r) {
  gpt_log_close(&r->lg);
  demo_offload_destroy(&r->dof);
  if (r->have_model) {
    gpt_train_free(&r->t);
    gpt_dp_destroy(&r->m);
    gpt_model_destroy(&r->m);
  }
  if (r->have_data) gpt_data_free(&r->d);
}

/* One training run (one process, or a rank of a --tp/--dp run: its losses
 * into losses[], the sum of its sample into *sample_sum), phase by phase:
 * setup, notes, the steps, the summary (and --save), the sample. */
static int run(struct opts *op, const struct gpt_tp *tp, const struct gpt_dp *dp, void *world,
               double *losses, uint64_t *sample_sum) {
  struct run_state *r = gpt_xalloc(sizeof *r);   /* zeroed */
  r->o = *op, r->tp = tp, r->dp = dp, r->world = world;
  r->losses = losses, r->sample_sum = sample_sum;
  int rc = run_setup(r);
  if (rc == TE_EXIT_OK && r->o.eval_file) {
    rc = gpt_eval_report(&OUT, &r->t, &r->m, r->o.eval_file, r->s);
  } else if (rc == TE_EXIT_OK) {
    run_figures(r);
    run_notes(r);
    rc = run_steps(r);
    /* the steps done: the output is ended whatever --save and --sample say */
    if (rc == TE_EXIT_OK) {
      rc = run_summary(r);
      /* --zero 3 holds no whole values to decode with (refused if asked) */
      if (rc == TE_EXIT_OK && r->o.sample > 0 && r->o.zero != 3) {
        gpt_dp_table_whole(&r->m, r->s);   /* --table-shards: the decoder reads it whole */
        rc = run_sample(r);
      }
      run_offload_notes(r);
      te_out_end(&OUT);
    }
  }
  run_free(r);
  free(r);
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

/* the processes of a --tp and --dp run */
static int ranks_of(const struct opts *o) {
  return (o->tp > 1 ? o->tp : 1) * (o->dp > 1 ? o->dp : 1);
}

/* --dp D --tp T: rank r of the D * T is rank r % T of tensor-parallel
 * group r / T (consecutive ranks: one replica's slices) and rank r / T of
 * data-parallel group r % T (the ranks holding the same slices). */
static int split_groups(struct demo_tp *t, const struct opts *o, int rank, struct gpt_tp *tp,
                        struct gpt_dp *dp) {
  int T = o->tp > 1 ? o->tp : 1, D = o->dp > 1 ? o->dp : 1;
  tecomm_comm_t tpc = t->comm, dpc = t->comm;
  tecomm_result_t r = TECOMM_SUCCESS;
  if (T > 1 && D > 1) {
    r = tecomm_comm_split(t->comm, rank / T, rank % T, &tpc);
    if (r == TECOMM_SUCCESS) r = tecomm_comm_split(t->comm, rank % T, rank / T, &dpc);
  }
  if (r != TECOMM_SUCCESS) {
    GPT_ERR("rank %d: the groups of --dp %d --tp %d: %s (%s)", rank, D, T, tecomm_strerror(r),
            tecomm_last_error());
    return -1;
  }
  t->params[DEMO_TP_FUSED].comm = tpc;
  demo_tp_bwd_nccl(t, 0);   /* the tp_copy operations' too */
  tp->size = T, tp->rank = rank % T, tp->comm = tpc, tp->sp = o->sp;
  *dp = (struct gpt_dp){.size = D, .rank = rank / T, .zero = o->zero, .comm = dpc,
                        .gshards = o->grad_shards, .tshards = o->table_shards};
  return 0;
}

/* A rank but 0 prints nothing (rank 0 speaks for all); nonzero on failure. */
static int quiet_rank(void) {
  OUT.quiet = 1;
  OUT.f = fopen("/dev/null", "w");
  OUT.format = TE_OUT_TABLE;
  return !freopen("/dev/null", "w", stdout);
}

static int tp_rank(void *arg, int rank) {
  struct tp_arg *a = arg;
  struct demo_tp t;
  if (demo_tp_init(&t, a->page, ranks_of(a->o), rank)) return TE_EXIT_FAIL;
  struct gpt_tp tp = {.size = a->o->tp, .rank = rank, .ctx = &t.params[DEMO_TP_FUSED],
                      .comm = t.comm, .area = a->sh->area,
                      .area_bytes = a->sh->bytes - sizeof *a->sh, .barrier = page_barrier,
                      .barrier_ctx = a->page};
  if (rank && quiet_rank()) return TE_EXIT_FAIL;
  struct gpt_dp dp = {0};
  if (split_groups(&t, a->o, rank, &tp, &dp)) return TE_EXIT_FAIL;
  int rc = run(a->o, tp.size > 1 ? &tp : NULL, dp.size > 1 ? &dp : NULL, t.comm,
               demo_tp_loss(a->page, 0, 0, rank), &a->sh->sample_sum[rank]);
  if (!rc && demo_tp_barrier(a->page)) rc = TE_EXIT_FAIL;
  if (dp.comm && dp.comm != t.comm) (void)tecomm_comm_destroy(dp.comm);
  if (tp.comm != t.comm) (void)tecomm_comm_destroy(tp.comm);
  demo_tp_fini(&t);
  return rc;
}

static struct tp_shared *tp_shared_create(const struct opts *o) {
  size_t bytes = sizeof(struct tp_shared) + (o->save || o->save_hf ? gpt_tp_area_bytes(&o->c) : 0);
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
  const int n = ranks_of(o);
  struct tp_arg a = {.o = o, .page = demo_tp_page_create(n, o->steps),
                     .sh = tp_shared_create(o)};
  if (!a.page || !a.sh) {
    demo_tp_page_free(a.page);
    if (a.sh) munmap(a.sh, a.sh->bytes);
    return TE_EXIT_FAIL;
  }
  int rc = demo_tp_fork(n, tp_rank, &a);
  if (rc == 0) {
    /* every rank computed the same replicated loss: the same bits */
    for (int r = 1; r < n; r++)
      if (memcmp(demo_tp_loss(a.page, 0, 0, r), demo_tp_loss(a.page, 0, 0, 0),
                 (size_t)o->steps * sizeof(double))) {
        GPT_ERR("%d ranks: rank %d's losses differ from rank 0's", n, r);
        rc = TE_EXIT_FAIL;
      }
    /* and sampled the same bytes (the same logits, the same draws) */
    for (int r = 1; r < n && o->sample > 0; r++)
      if (a.sh->sample_sum[r] != a.sh->sample_sum[0]) {
        GPT_ERR("%d ranks: rank %d sampled other bytes than rank 0", n, r);
        rc = TE_EXIT_FAIL;
      }
    if (!rc && !o->quiet && OUT.format == TE_OUT_TABLE)
      printf("# %d ranks: the losses%s are the same bits on every rank\n", n,
             o->sample > 0 ? " and the sample" : "");
  }
  demo_tp_page_free(a.page);
  munmap(a.sh, a.sh->bytes);
  return rc;
}

/* Who started this process as one rank of several: TECOMM_RANK (wins
 * when set), mpirun (Open MPI's OMPI_COMM_WORLD_*, MPICH's PMI_*, PMIx's;
 * a build with MPI only) or Slurm's srun (SLURM_PROCID, SLURM_NTASKS; one
 * task is one process, as in a batch script outside srun).  n: the
 * launcher's size, -1 when it is libtecomm's to read (TECOMM_NRANKS). */
struct launch {
  const char *by;   /* the launcher in messages; NULL: none (fork the ranks) */
  struct tecomm_bootstrap b;
  int rank, n, device;
};

/* *l for this process's launcher; under mpirun MPI is initialized here
 * (launch_end finalizes it) */
static void launch_find(struct launch *l) {
  *l = (struct launch){.b = {.kind = TECOMM_BOOTSTRAP_ENV}, .rank = -1, .n = -1, .device = -1};
  if (getenv("TECOMM_RANK")) {
    l->by = "TECOMM_NRANKS", l->n = env_int("TECOMM_NRANKS");
  } else if (under_mpi()) {
#ifdef TE_HAVE_MPI
    static MPI_Comm world;   /* outlives the communicator */
    if (MPI_Init(NULL, NULL) == MPI_SUCCESS) world = MPI_COMM_WORLD;
    l->by = "mpirun";
    /* device -1: libtecomm's local rank (the ranks before this one on its host) */
    if (tecomm_mpi_bootstrap(&world, &l->b, &l->rank, &l->n) != TECOMM_SUCCESS) l->n = 0;
#endif
  } else if (env_int("SLURM_NTASKS") > 1 && env_int("SLURM_PROCID") >= 0) {
    l->by = "srun", l->n = env_int("SLURM_NTASKS"), l->rank = env_int("SLURM_PROCID");
    int local = env_int("SLURM_LOCALID"), count = 0;
    if (local >= 0 && tecore_device_count(&count) == TECORE_SUCCESS && count > 0)
      l->device = local % count;   /* one GPU a task (CUDA_VISIBLE_DEVICES) or all */
  }
}

static void launch_end(const struct launch *l) {
#ifdef TE_HAVE_MPI
  int done = 0;
  if (l->by && !strcmp(l->by, "mpirun") && MPI_Finalized(&done) == MPI_SUCCESS && !done)
    MPI_Finalize();
#else
  (void)l;
#endif
}

/* The launcher's fit: -1 to run, else the exit status (a misfit of
 * sizes is a usage error, the same on every rank: none waits) */
static int launch_misfit(const struct launch *l, const struct opts *o) {
  if (!l->by) return -1;
  if (!strcmp(l->by, "mpirun") && l->n < 1) {
    GPT_ERR("mpirun: MPI_Init or MPI_COMM_WORLD's rank and size failed");
    return TE_EXIT_FAIL;
  }
  if (l->n >= 1 && l->n != ranks_of(o)) {
    GPT_ERR("%s: %d ranks, but --dp %d x --tp %d is %d (they must multiply to %d)", l->by, l->n,
            o->dp > 1 ? o->dp : 1, o->tp > 1 ? o->tp : 1, ranks_of(o), l->n);
    return TE_EXIT_USAGE;
  }
  const char *root = getenv("TECOMM_ROOT");
  if (!strcmp(l->by, "srun") && (!root || !*root)) {
    GPT_ERR("srun: %d tasks and no MPI: set TECOMM_ROOT=host:port (rank 0's host, a free "
            "port) and TECOMM_SECRET for every task (te-gpt(1), ENVIRONMENT)", l->n);
    return TE_EXIT_USAGE;
  }
  return -1;
}

/* Launched as one rank of the --dp x --tp grid (struct launch): no
 * fork, no shared page (so no --tp --save: its slices meet in the page),
 * rank 0 prints. */
static int run_launched(struct opts *o, const struct launch *l) {
  struct demo_tp t = {0};
  struct tecomm_bootstrap b = l->b;
  tecomm_result_t r = tecomm_comm_init(l->rank, l->n, l->device, &b, &t.comm);
  if (r == TECOMM_SUCCESS) r = tecomm_comm_rank(t.comm, &t.rank, &t.n, NULL);
  if (r == TECOMM_SUCCESS) r = tecomm_ops_register();
  if (r != TECOMM_SUCCESS) {
    GPT_ERR("%s: the communicator: %s (%s)", l->by, tecomm_strerror(r), tecomm_last_error());
    return TE_EXIT_FAIL;
  }
  int rc = TE_EXIT_FAIL;
  struct gpt_tp tp = {0};
  struct gpt_dp dp = {0};
  if (t.n != ranks_of(o))   /* TECOMM_NRANKS as libtecomm read it */
    GPT_ERR("%s %d, but --dp %d x --tp %d ranks", l->by, t.n, o->dp > 1 ? o->dp : 1,
            o->tp > 1 ? o->tp : 1);
  else if (!split_groups(&t, o, t.rank, &tp, &dp)) {
    tp.ctx = &t.params[DEMO_TP_FUSED];
    if (t.rank) quiet_rank();
    rc = run(o, tp.size > 1 ? &tp : NULL, dp.size > 1 ? &dp : NULL, t.comm, NULL, NULL);
  }
  if (dp.comm && dp.comm != t.comm) (void)tecomm_comm_destroy(dp.comm);
  if (tp.comm && tp.comm != t.comm) (void)tecomm_comm_destroy(tp.comm);
  (void)tecomm_comm_destroy(t.comm);
  return rc;
}

/* A launched process: one rank, or (a launcher of one) the whole run */
static int run_ranks(struct opts *o) {
  struct launch l;
  launch_find(&l);
  int rc = launch_misfit(&l, o);
  if (rc < 0 && l.by && (l.n != 1 || ranks_of(o) > 1)) rc = run_launched(o, &l);
  else if (rc < 0) rc = ranks_of(o) > 1 ? run_tp(o) : run(o, NULL, NULL, NULL, NULL, NULL);
  launch_end(&l);
  return rc;
}

/* argv's options into o: -1, or the exit status; --tokenize IN OUT
 * takes the word after the options */
static int parse_words(struct te_cli *cli, struct opts *o, int argc, char **argv) {
  int opt;
  optind = 0;   /* glibc: a fresh scan */
  while ((opt = te_cli_next(cli, argc, argv)) != -1) {
    if (opt == TE_CLI_EXIT) return cli->status;
    if (take(cli, o, opt, optarg)) return cli->status;
  }
  if (o->tokenize && o->pass != 1) {
    if (optind >= argc) return te_cli_error(cli, "--tokenize IN OUT: OUT is missing");
    o->tokenize_out = argv[optind++];
  }
  if (te_cli_end(cli, argc, argv)) return cli->status;
  return -1;
}

/* --load: the checkpoint's stored options, then the command line's again
 * over them (te-gpt(1), "Checkpoints") */
static int with_stored(struct te_cli *cli, struct opts *o, const struct opts *dflt, int argc,
                       char **argv) {
  char **w;
  int n;
  if (gpt_load_run_args(o->load, &w, &n)) return TE_EXIT_FAIL;
  if (n <= 1) return free(w), -1;
  const char *load = o->load;
  char **files = o->files;
  *o = *dflt;
  o->files = files, o->load = load, o->pass = 1, o->words = w, o->nwords = n;
  int rc = parse_words(cli, o, n, w);
  if (rc >= 0) return rc;
  o->pass = 2;
  return parse_words(cli, o, argc, argv);
}

/* The tokenizer of --load's checkpoint (a --tokenizer given must match
 * it) or of --load-hf's directory (unless --tokenizer is given): 0 or -1 */
static int ckpt_tokenizer(struct opts *o) {
  if (o->load && gpt_tok_of_checkpoint(o->load, o->tokenizer, &o->tok_path)) return -1;
  if (o->load_hf && !o->tokenizer) o->tok_path = gpt_tok_of_hf(o->load_hf);
  if (o->tok_path) o->tokenizer = o->tok_path;
  return 0;
}

/* --tp n against --load's or --load-hf's shape: -1 when it splits, else
 * the exit status */
static int tp_fits_loaded(struct te_cli *cli, struct opts *o) {
  const char *dir = o->load ? o->load : o->load_hf;
  if (o->tp <= 1 || !dir) return -1;
  char from[4200];
  snprintf(from, sizeof from, " (the shape of the checkpoint %s)", dir);
  if (o->load ? gpt_load_config(dir, &o->c) : gpt_hf_config(dir, &o->c)) return TE_EXIT_FAIL;
  if (tp_misfit(cli, o->tp, &o->c, from) || sp_misfit(cli, o, o->batch, from)) return cli->status;
  return -1;
}

/* The options into o, defaults resolved: -1 to run, else the exit status
 * (--help, --version, a bad option). */
static int parse(struct opts *o, int argc, char **argv) {
  struct te_cli cli = {.prog = "te-gpt", .usage = usage_text, .shorts = "qh", .longs = longs,
                       .out = &OUT};
  const struct opts dflt = *o;
  int rc = parse_words(&cli, o, argc, argv);
  if (rc < 0 && o->load) rc = with_stored(&cli, o, &dflt, argc, argv);
  if (rc >= 0) return rc;
  struct gpt_config given = o->c;
  if (resolve(&cli, o, given, &o->batch)) return cli.status;
  /* the ranks take the checkpoint's shape: it must split n ways */
  if ((rc = tp_fits_loaded(&cli, o)) >= 0) return rc;
  if (ckpt_tokenizer(o)) return TE_EXIT_FAIL;
  if (o->decay_steps <= 0) o->decay_steps = o->steps > 0 ? o->steps : 1;
  if (o->warmup < 0) o->warmup = o->decay_steps / 10;
  if (o->min_lr < 0) o->min_lr = o->lr / 10;
  record_run(o);
  o->quiet = cli.quiet;
  return -1;
}

int main(int argc, char **argv) {
  struct opts o = {.model = "tiny", .steps = 30, .accum = 1, .lr = -1, .min_lr = -1,
                   .warmup = -1, .wd = 0.1, .clip = 1.0, .seed = 1, .eval_every = 10,
                   .eval_batches = 4, .sample = 64, .prompt = "", .share_saved = 1,
                   .grad_shards = 1, .table_shards = 1};
  o.files = calloc(1, sizeof *o.files);
  if (!o.files) {
    fprintf(stderr, "te-gpt: out of memory\n");
    return 1;
  }
  demo_tp_set_tool("te-gpt");   /* the ranks' messages */
  int rc = parse(&o, argc, argv);
  if (rc < 0 && o.tokenize) rc = gpt_shard_write(o.tokenize, o.tokenize_out, o.tokenizer) ? TE_EXIT_FAIL : 0;
  if (rc < 0) rc = run_ranks(&o);
  gpt_run_args_free(&o.run_args);
  free(o.tok_path);
  for (int i = 1; i < o.nwords; i++) free(o.words[i]);
  free(o.words);
  free(o.files);
  return rc;
}
