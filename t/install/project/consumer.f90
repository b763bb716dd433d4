! SPDX-License-Identifier: Apache-2.0
! t/install/project/consumer.f90 -- a Fortran program built by make installcheck
! with CMake against the INSTALLED libte, through the imported target
! libte::fortran (t/install/project/CMakeLists.txt, t/install/installcheck-cmake.sh).
! It proves that the target finds the installed module files and links
! libtefortran with the C libraries under it, that libtefortran's version
! script exports what a caller uses: module procedures of all three
! modules (the string wrappers) and a type's helpers (class(*) of a
! tecore_tensor takes its vtab and copy routine), and that libtecore quantizes right.
!
! The check: n random floats in [-448, 448) (seed printed; TE_SEED repeats
! a run), quantized to E4M3 on the device with delayed scaling at scale 1,
! output poisoned first (0x7f bytes, a NaN).  Asserted: every byte equals
! the host conversion tecore_cvt_f32_to_e4m3 (the same bits as the
! kernels: exact); amax (max-accumulated into 0) is max|x| exactly;
! scale_inv is exactly 1.  Exit 0 pass, 1 fail (the reason printed).
program consumer
  use te_core
  use te_graph
  use te_comm
  implicit none
  integer, parameter :: n = 2048
  real(c_float), target :: x(n), amax, scale, scale_inv
  integer(c_int8_t), target :: q(n), ref(n)
  integer(c_size_t) :: shape(1)
  integer(tecore_devptr_t) :: dx, dq, dscale, dscale_inv, damax
  type(tecore_tensor) :: tin, tout
  class(*), allocatable :: any
  integer :: i, bad, seed_size
  integer, allocatable :: seed(:)
  integer(c_int64_t) :: seed0
  character(len=32) :: env

  ! the seed: TE_SEED, else the clock
  call get_environment_variable('TE_SEED', env)
  if (len_trim(env) > 0) then
    read(env, *) seed0
  else
    call system_clock(seed0)
  end if
  print '(a,i0,a)', 'seed ', seed0, ' (TE_SEED repeats this run)'
  call random_seed(size=seed_size)
  allocate(seed(seed_size))
  seed = int(mod(seed0, 2147483647_c_int64_t)) + [(37 * i, i = 1, seed_size)]
  call random_seed(put=seed)
  call random_number(x)
  x = (x * 2 - 1) * 448

  ! a module procedure of each module (strings cross through libtefortran)
  call expect(len(tecore_strerror(TECORE_SUCCESS)) > 0, 'tecore_strerror is empty')
  call expect(len(tegraph_strerror(TEGRAPH_SUCCESS)) > 0, 'tegraph_strerror is empty')
  call expect(len(tecomm_strerror(TECOMM_SUCCESS)) > 0, 'tecomm_strerror is empty')

  call try(tecore_init(), 'tecore_init')
  call try(tecore_mem_alloc(int(4 * n, c_size_t), dx), 'alloc')
  call try(tecore_mem_alloc(int(n, c_size_t), dq), 'alloc')
  call try(tecore_mem_alloc(4_c_size_t, dscale), 'alloc')
  call try(tecore_mem_alloc(4_c_size_t, dscale_inv), 'alloc')
  call try(tecore_mem_alloc(4_c_size_t, damax), 'alloc')
  scale = 1
  amax = 0
  scale_inv = -1
  q = int(z'7f', c_int8_t)
  call try(tecore_memcpy(dx, tecore_f_devptr(c_loc(x)), int(4 * n, c_size_t)), 'copy x')
  call try(tecore_memcpy(dq, tecore_f_devptr(c_loc(q)), int(n, c_size_t)), 'poison q')
  call try(tecore_memcpy(dscale, tecore_f_devptr(c_loc(scale)), 4_c_size_t), 'copy scale')
  call try(tecore_memcpy(damax, tecore_f_devptr(c_loc(amax)), 4_c_size_t), 'zero amax')
  call try(tecore_memcpy(dscale_inv, tecore_f_devptr(c_loc(scale_inv)), 4_c_size_t), 'poison')

  shape = [int(n, c_size_t)]
  call try(tecore_tensor_init(tin, TECORE_DTYPE_F32, 1, shape, dx), 'tensor_init')
  call try(tecore_tensor_init(tout, TECORE_DTYPE_E4M3, 1, shape, dq), 'tensor_init')
  tout%scaling = TECORE_SCALING_DELAYED
  tout%scale = dscale
  tout%scale_inv = dscale_inv
  tout%amax = damax
  ! the tensor through class(*): the caller's code takes te_core's vtab
  ! (its size and copy routine; a bind(C) type cannot be a SELECT TYPE case)
  any = tout
  call expect(storage_size(any) == storage_size(tout), 'class(*) of a tecore_tensor: wrong size')
  deallocate(any)

  call try(tecore_quantize(tin, tout, 0_tecore_devptr_t, c_null_ptr), 'quantize')
  call try(tecore_ctx_synchronize(), 'synchronize')
  call try(tecore_memcpy(tecore_f_devptr(c_loc(q)), dq, int(n, c_size_t)), 'copy q')
  call try(tecore_memcpy(tecore_f_devptr(c_loc(amax)), damax, 4_c_size_t), 'copy amax')
  call try(tecore_memcpy(tecore_f_devptr(c_loc(scale_inv)), dscale_inv, 4_c_size_t), 'copy')

  call try(tecore_cvt_f32_to_e4m3(x, ref, int(n, c_size_t)), 'tecore_cvt_f32_to_e4m3')
  bad = count(q /= ref)
  if (bad > 0) then
    i = findloc(q /= ref, .true., dim=1)
    print '(a,i0,a,i0,a,es14.7,a,i0,a,i0)', 'E4M3: ', bad, ' of ', n, ' bytes differ; first x=', &
      x(i), ' got ', q(i), ' want ', ref(i)
    error stop 1
  end if
  call expect(amax == maxval(abs(x)), 'amax is not max|x|')
  call expect(scale_inv == 1, 'scale_inv is not 1 at scale 1')

  call try(tecore_mem_free(dx), 'free')
  call try(tecore_mem_free(dq), 'free')
  call try(tecore_mem_free(dscale), 'free')
  call try(tecore_mem_free(dscale_inv), 'free')
  call try(tecore_mem_free(damax), 'free')
  print '(a,i0,a)', 'consumer.f90: ', n, ' values quantized to E4M3 equal the host conversion; amax exact'

contains

  subroutine try(r, what)
    integer(c_int), intent(in) :: r
    character(len=*), intent(in) :: what
    if (r /= TECORE_SUCCESS) then
      print '(a)', what // ': ' // tecore_strerror(r) // ': ' // tecore_last_error()
      error stop 1
    end if
  end subroutine try

  subroutine expect(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      print '(a)', 'FAIL: ' // what
      error stop 1
    end if
  end subroutine expect
end program consumer
