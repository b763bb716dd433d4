! SPDX-License-Identifier: Apache-2.0
! rmsnorm_fp8.f90 -- RMSNorm with an FP8 output, from Fortran.
!
! y = x / sqrt(mean(x^2) + eps) * gamma over each row of x [rows][hidden]
! (C's row-major shape: Fortran's x(hidden, rows)), written as E4M3 with
! delayed scaling (the kernel reads y%scale, writes scale_inv = 1/scale
! and max-accumulates amax = max|y| before the scale).  The FP8 output is
! dequantized back to F32 and compared with a host reference computed in
! double: E4M3 keeps 3 mantissa bits, so each value is within 2^-4 of
! the reference (relative; 2^-9 / scale absolute near zero), and amax is
! the reference's largest |y| within 1e-5 relative.
!
! Build and run against an installed libte:
!   gfortran rmsnorm_fp8.f90 $(pkg-config --cflags --libs te-fortran) \
!     -Wl,-rpath,"$(pkg-config --variable=libdir te-fortran)" -o rmsnorm_fp8
!   ./rmsnorm_fp8         (TE_DEVICE=vdev runs it without a GPU)
! Exit 0 when every value is within tolerance, 1 otherwise.
program rmsnorm_fp8
  use te_core          ! also brings iso_c_binding
  implicit none
  integer, parameter :: rows = 16, hidden = 96
  real(c_float), parameter :: eps = 1.0e-5
  real(c_float), target :: x(hidden, rows), gamma(hidden), back(hidden, rows)
  real(c_float), target :: scale, amax, scale_inv, zero
  real(c_double) :: ref(hidden, rows), tol, ref_amax
  integer(c_size_t) :: xshape(2), gshape(1)
  integer(tecore_devptr_t) :: dx, dgamma, dq, dback, dscale, dsinv, damax
  type(tecore_tensor) :: tx, tgamma, ty, tback
  integer :: i, j, bad

  call random_seed()
  call random_number(x)
  x = 4 * x - 2
  call random_number(gamma)
  gamma = 0.5 + gamma
  scale = 16          ! |y| stays below 448 / 16 = 28, E4M3's largest over the scale
  zero = 0

  call try(tecore_init(), 'tecore_init')
  call try(tecore_mem_alloc(int(4 * hidden * rows, c_size_t), dx), 'alloc x')
  call try(tecore_mem_alloc(int(4 * hidden, c_size_t), dgamma), 'alloc gamma')
  call try(tecore_mem_alloc(int(hidden * rows, c_size_t), dq), 'alloc y')
  call try(tecore_mem_alloc(int(4 * hidden * rows, c_size_t), dback), 'alloc back')
  call try(tecore_mem_alloc(4_c_size_t, dscale), 'alloc scale')
  call try(tecore_mem_alloc(4_c_size_t, dsinv), 'alloc scale_inv')
  call try(tecore_mem_alloc(4_c_size_t, damax), 'alloc amax')
  ! host addresses pass as device addresses (unified addressing)
  call try(tecore_memcpy(dx, tecore_f_devptr(c_loc(x)), int(4 * hidden * rows, c_size_t)), 'copy x')
  call try(tecore_memcpy(dgamma, tecore_f_devptr(c_loc(gamma)), int(4 * hidden, c_size_t)), 'copy gamma')
  call try(tecore_memcpy(dscale, tecore_f_devptr(c_loc(scale)), 4_c_size_t), 'copy scale')
  call try(tecore_memcpy(damax, tecore_f_devptr(c_loc(zero)), 4_c_size_t), 'reset amax')
  ! poison the outputs (0xff bytes: NaN in E4M3 and in F32)
  call try(tecore_memset_d8_async(dq, -1_c_int8_t, int(hidden * rows, c_size_t), c_null_ptr), 'poison')
  call try(tecore_memset_d8_async(dback, -1_c_int8_t, int(4 * hidden * rows, c_size_t), c_null_ptr), &
    & 'poison')

  xshape = [int(rows, c_size_t), int(hidden, c_size_t)]
  gshape = [int(hidden, c_size_t)]
  call try(tecore_tensor_init(tx, TECORE_DTYPE_F32, 2, xshape, dx), 'tensor x')
  call try(tecore_tensor_init(tgamma, TECORE_DTYPE_F32, 1, gshape, dgamma), 'tensor gamma')
  call try(tecore_tensor_init(ty, TECORE_DTYPE_E4M3, 2, xshape, dq), 'tensor y')
  call try(tecore_tensor_init(tback, TECORE_DTYPE_F32, 2, xshape, dback), 'tensor back')
  ty%scaling = TECORE_SCALING_DELAYED
  ty%scale = dscale
  ty%scale_inv = dsinv
  ty%amax = damax
  ! flags 0, no rsigma output (0), the default stream (c_null_ptr)
  call try(tecore_rmsnorm_fwd(tx, tgamma, eps, 0_c_int, ty, 0_tecore_devptr_t, c_null_ptr), 'rmsnorm_fwd')
  call try(tecore_dequantize(ty, tback, c_null_ptr), 'dequantize')
  call try(tecore_ctx_synchronize(), 'synchronize')
  call try(tecore_memcpy(tecore_f_devptr(c_loc(back)), dback, int(4 * hidden * rows, c_size_t)), 'copy back')
  call try(tecore_memcpy(tecore_f_devptr(c_loc(amax)), damax, 4_c_size_t), 'copy amax')
  call try(tecore_memcpy(tecore_f_devptr(c_loc(scale_inv)), dsinv, 4_c_size_t), 'copy scale_inv')

  ! the reference, in double
  do j = 1, rows
    ref(:, j) = x(:, j) / sqrt(sum(real(x(:, j), c_double)**2) / hidden + eps) * gamma
  end do
  ref_amax = maxval(abs(ref))
  bad = 0
  do j = 1, rows
    do i = 1, hidden
      tol = max(abs(ref(i, j)) / 16, 2.0d0**(-9) / scale)
      if (.not. (abs(back(i, j) - ref(i, j)) <= tol)) then   ! a NaN fails too
        bad = bad + 1
        if (bad <= 5) print '(a,i0,a,i0,a,es12.5,a,es12.5)', 'rmsnorm_fp8: y(', i, ',', j, ') = ', &
          & back(i, j), ', reference ', ref(i, j)
      end if
    end do
  end do
  if (scale_inv /= 1 / scale) then
    print '(a,es12.5)', 'rmsnorm_fp8: scale_inv is ', scale_inv
    bad = bad + 1
  end if
  if (.not. (abs(amax - ref_amax) <= 1.0d-5 * ref_amax)) then
    print '(a,es12.5,a,es12.5)', 'rmsnorm_fp8: amax ', amax, ', reference ', ref_amax
    bad = bad + 1
  end if

  call try(tecore_mem_free(dx), 'free')
  call try(tecore_mem_free(dgamma), 'free')
  call try(tecore_mem_free(dq), 'free')
  call try(tecore_mem_free(dback), 'free')
  call try(tecore_mem_free(dscale), 'free')
  call try(tecore_mem_free(dsinv), 'free')
  call try(tecore_mem_free(damax), 'free')
  if (bad /= 0) then
    print '(a,i0,a)', 'rmsnorm_fp8: ', bad, ' values out of tolerance'
    error stop 1
  end if
  print '(a,i0,a,i0,a,a,a,es10.3)', 'rmsnorm_fp8: ', rows, ' x ', hidden, ' normalized to ', &
    & tecore_dtype_name(ty%dtype), ', amax ', amax

contains

  ! every libtecore call returns a result code; the detail is per thread
  subroutine try(r, what)
    integer(c_int), intent(in) :: r
    character(len=*), intent(in) :: what
    if (r /= TECORE_SUCCESS) then
      print '(a)', 'rmsnorm_fp8: ' // what // ': ' // tecore_strerror(r) // ': ' // tecore_last_error()
      error stop 1
    end if
  end subroutine try
end program rmsnorm_fp8
