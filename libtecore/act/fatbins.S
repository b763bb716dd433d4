/* fatbins.S -- embeds the activation and norm kernels' fatbins (nvcc
 * builds kernels/act.cu and kernels/norm.cu) in libtecore's read-only
 * data, with hidden start and end symbols for libtecore/act/act.c and
 * libtecore/norm/norm.c.  The assembler finds the files through -I
 * (AM_CCASFLAGS: the build's kernels folder). */
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
TE_FATBIN(te_fatbin_act, "act.fatbin")
TE_FATBIN(te_fatbin_norm, "norm.fatbin")

  .section .note.GNU-stack, "", @progbits
