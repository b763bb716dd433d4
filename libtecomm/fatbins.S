/* SPDX-License-Identifier: Apache-2.0 */
/* fatbins.S -- embeds libtecomm's kernel fatbin (kernels/comm_ar.cu, the
 * allreduce protocols) in the library's read-only data, with hidden start
 * and end symbols for its kernel table (ar_kernels.c).  The assembler
 * finds the file through -I (AM_CCASFLAGS). */
  .section .rodata.te_fatbins, "a", @progbits
  .balign 64
  .globl te_fatbin_comm_ar
  .hidden te_fatbin_comm_ar
te_fatbin_comm_ar:
  .incbin "comm_ar.fatbin"
  .globl te_fatbin_comm_ar_end
  .hidden te_fatbin_comm_ar_end
te_fatbin_comm_ar_end:

  .section .note.GNU-stack, "", @progbits
