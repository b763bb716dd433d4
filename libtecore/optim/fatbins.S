/* fatbins.S -- embeds the optimizer kernels' fatbin (nvcc builds
 * kernels/optim.cu) in libtecore's read-only data, with hidden start and
 * end symbols for the kernel table in libtecore/optim/optim.c.  The
 * assembler finds the file through -I (AM_CCASFLAGS: the build's kernels
 * folder). */
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
TE_FATBIN(te_fatbin_optim, "optim.fatbin")

  .section .note.GNU-stack, "", @progbits
