! SPDX-License-Identifier: Apache-2.0
! example.f90 -- the example of te_fortran(7): quantize a matrix to FP8 (E4M3,
! delayed scaling) from Fortran, dequantize it, and print the largest
! relative error (E4M3 keeps 3 mantissa bits: at most 2^-4).
! Build against an installed libte:
!   gfortran example.f90 $(pkg-config --cflags --libs te-fortran) -o example
program example
  use te_core          ! also brings iso_c_binding
  implicit none
  integer, parameter :: rows = 4, cols = 8
  real(c_float), target :: x(cols, rows), y(cols, rows), scale
  integer(c_size_t) :: shape(2)
  integer(tecore_devptr_t) :: dx, dq, dy, dscale, dscale_inv
  type(tecore_tensor) :: tin, tout, tback
  integer :: i, j

  call try(tecore_init(), 'tecore_init')
  do j = 1, rows
    do i = 1, cols
      x(i, j) = real(i - j, c_float) / 3.0 + 0.01
    end do
  end do
  scale = 64
  call try(tecore_mem_alloc(int(4 * rows * cols, c_size_t), dx), 'alloc')
  call try(tecore_mem_alloc(int(rows * cols, c_size_t), dq), 'alloc')
  call try(tecore_mem_alloc(int(4 * rows * cols, c_size_t), dy), 'alloc')
  call try(tecore_mem_alloc(4_c_size_t, dscale), 'alloc')
  call try(tecore_mem_alloc(4_c_size_t, dscale_inv), 'alloc')
  ! host addresses pass as device addresses (unified addressing)
  call try(tecore_memcpy(dx, tecore_f_devptr(c_loc(x)), int(4 * rows * cols, c_size_t)), 'copy x')
  call try(tecore_memcpy(dscale, tecore_f_devptr(c_loc(scale)), 4_c_size_t), 'copy scale')

  ! C shapes are row-major: [rows][cols] is Fortran's x(cols, rows)
  shape = [int(rows, c_size_t), int(cols, c_size_t)]
  call try(tecore_tensor_init(tin, TECORE_DTYPE_F32, 2, shape, dx), 'tensor_init')
  call try(tecore_tensor_init(tout, TECORE_DTYPE_E4M3, 2, shape, dq), 'tensor_init')
  call try(tecore_tensor_init(tback, TECORE_DTYPE_F32, 2, shape, dy), 'tensor_init')
  tout%scaling = TECORE_SCALING_DELAYED
  tout%scale = dscale
  tout%scale_inv = dscale_inv
  ! the default stream (c_null_ptr); dequantize reads scale_inv, which
  ! quantize wrote
  call try(tecore_quantize(tin, tout, 0_tecore_devptr_t, c_null_ptr), 'quantize')
  call try(tecore_dequantize(tout, tback, c_null_ptr), 'dequantize')
  call try(tecore_ctx_synchronize(), 'synchronize')

  call try(tecore_memcpy(tecore_f_devptr(c_loc(y)), dy, int(4 * rows * cols, c_size_t)), 'copy y')
  print '(a,a,a,es10.3)', 'x -> ', tecore_dtype_name(tout%dtype), ' -> f32: largest relative error ', &
    maxval(abs(y - x) / abs(x))

  call try(tecore_mem_free(dx), 'free')
  call try(tecore_mem_free(dq), 'free')
  call try(tecore_mem_free(dy), 'free')
  call try(tecore_mem_free(dscale), 'free')
  call try(tecore_mem_free(dscale_inv), 'free')

contains

  ! every libtecore call returns a result code; the detail is per thread
  subroutine try(r, what)
    integer(c_int), intent(in) :: r
    character(len=*), intent(in) :: what
    if (r /= TECORE_SUCCESS) then
      print '(a)', what // ': ' // tecore_strerror(r) // ': ' // tecore_last_error()
      error stop 1
    end if
  end subroutine try
end program example
