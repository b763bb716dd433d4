/* fatbins.S -- embeds the cast-transpose kernels' fatbin (nvcc builds
 * kernels/transpose.cu) in libtecore's read-only data, with hidden start
 * and end symbols for libtecore/transpose/transpose.c.  The assembler
 * finds the file through -I (AM_CCASFLAGS: the build's kernels folder). */
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
TE_FATBIN(te_fatbin_transpose, "transpose.fatbin")

  .section .note.GNU-stack, "", @progbits
