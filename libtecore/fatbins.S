/* fatbins.S -- embeds libtecore's kernel fatbins (built by nvcc from
 * kernels/*.cu) in the library's read-only data.  Each gets a start and an
 * end symbol, both hidden; libtecore/elementwise.c and the other kernel
 * tables point at them.  The assembler finds the files through -I. */
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

  .section .note.GNU-stack, "", @progbits
