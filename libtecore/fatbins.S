/* SPDX-License-Identifier: Apache-2.0 */
/* fatbins.S -- embeds libtecore's kernel fatbins (built by nvcc from
 * kernels/*.cu) in the library's read-only data, one line per kernel file.
 * Each gets a start and an end symbol, both hidden; the kernel tables
 * (TE_KERNEL_TABLE_FATBIN) point at them.  The assembler finds the files through
 * -I (AM_CCASFLAGS). */
#define TE_FATBIN(sym, file)      \
  .balign 64;                     \
  .globl sym;                     \
  .hidden sym;                    \
  sym:;                           \
  .incbin file;                   \
  .globl sym##_end;               \
  .hidden sym##_end;              \
  sym##_end:;

  .section .rodata.te_fatbins, "a", @progbits
TE_FATBIN(te_fatbin_elementwise, "elementwise.fatbin")
TE_FATBIN(te_fatbin_fp8_scale, "fp8_scale.fatbin")
TE_FATBIN(te_fatbin_quantize, "quantize.fatbin")
TE_FATBIN(te_fatbin_fp8_recipe, "fp8_recipe.fatbin")
TE_FATBIN(te_fatbin_transpose, "transpose.fatbin")
TE_FATBIN(te_fatbin_act, "act.fatbin")
TE_FATBIN(te_fatbin_norm, "norm.fatbin")
TE_FATBIN(te_fatbin_optim, "optim.fatbin")
TE_FATBIN(te_fatbin_attention, "attention.fatbin")
TE_FATBIN(te_fatbin_attn_cudnn, "attn_cudnn.fatbin")
TE_FATBIN(te_fatbin_rope, "rope.fatbin")
TE_FATBIN(te_fatbin_embedding, "embedding.fatbin")
TE_FATBIN(te_fatbin_xent, "xent.fatbin")
TE_FATBIN(te_fatbin_gemm16, "gemm16.fatbin")
TE_FATBIN(te_fatbin_graph_fire, "graph_fire.fatbin")

  .section .note.GNU-stack, "", @progbits
