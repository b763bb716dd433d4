/* fatbins.S -- embeds the FP8 kernel fatbins (kernels/quantize.cu,
 * kernels/fp8_recipe.cu, built by nvcc) in libtecore's read-only data, the
 * way libtecore/fatbins.S does for the others.  Each gets hidden start and
 * end symbols; libtecore/fp8/quantize.c and recipe.c point their kernel
 * tables at them.  The assembler finds the files through -I (AM_CCASFLAGS). */
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
TE_FATBIN(te_fatbin_quantize, "quantize.fatbin")
TE_FATBIN(te_fatbin_fp8_recipe, "fp8_recipe.fatbin")

  .section .note.GNU-stack, "", @progbits
