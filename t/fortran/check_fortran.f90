! SPDX-License-Identifier: Apache-2.0
! check_fortran.f90 -- the Fortran modules used as a Fortran code would use
! them (TAP on stdout, run by make check on whatever TE_DEVICE selects):
!   1 strings     result names, dtype names, the version and the last-error
!                 detail of a refused call come back as Fortran strings;
!   2 quantize    x [rows x cols] f32 -> E4M3 with delayed scaling: every
!                 FP8 value equals a Fortran-computed reference (round to
!                 nearest even, saturate at 448) exactly, scale_inv = 1/scale
!                 (rel. 1e-6), amax = max|x| exactly; outputs poisoned first;
!   3 graph       the same quantize captured into a te_graph graph and
!                 replayed twice on fresh inputs: each replay's output
!                 equals the reference of that replay's input exactly;
!   4 layout      tecore_tensor_init fills the bind(C) type as C sees it
!                 (tecore_tensor_numel and tecore_tensor_2d read it back);
!   5 convert     the host conversions through array arguments: all 256
!                 E4M3 bytes decode as the Fortran decoder says, and random
!                 floats encode to the Fortran reference (exact);
!   6 defaults    a declared bind(C) variable and the empty constructor
!                 tecore_attention_args() are zeroed structs (numbers 0,
!                 pointers null; issue 60: the constructor did not
!                 compile), over a variable poisoned first; the describe
!                 functions take and fill an allocatable string.
! Inputs are random (xorshift, seed printed; TE_TEST_SEED=N repeats a run).
! A missing device on TE_DEVICE=cuda is a skip ("1..0 # SKIP").
program check_fortran
  use, intrinsic :: iso_c_binding
  use, intrinsic :: ieee_arithmetic, only: ieee_rint
  use te_core
  use te_graph
  implicit none
  integer, parameter :: rows = 48, cols = 80, n = rows * cols
  ! device buffers of one quantize: x (f32), q (E4M3), scale, scale_inv, amax
  type :: qbufs
    integer(tecore_devptr_t) :: x, q, scale, scale_inv, amax
    type(tecore_tensor) :: tin, tout
  end type qbufs
  integer(c_int64_t) :: rng
  integer :: ntest = 0, nfail = 0
  integer(c_int) :: r
  type(c_ptr) :: stream

  call seed_rng()
  r = tecore_init()
  if (r /= TECORE_SUCCESS) then
    if (r == TECORE_ERR_NO_DRIVER .or. r == TECORE_ERR_NO_DEVICE) then
      print '(a)', '1..0 # SKIP no device: ' // tecore_last_error()
      stop
    end if
    print '(a)', 'Bail out! tecore_init: ' // tecore_result_name(r) // ': ' // tecore_last_error()
    stop 1
  end if
  print '(a)', '1..6'
  print '(a)', '# backend ' // backend()
  call check(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, stream), 'stream_create')

  call test_strings()
  call test_quantize()
  call test_graph()
  call test_tensor_init()
  call test_convert()
  call test_defaults()

  call check(tecore_stream_destroy(stream), 'stream_destroy')
  if (nfail > 0) stop 1

contains

  ! ---- 6: default initialization ------------------------------------------

  subroutine test_defaults()
    type(tecore_transformer_desc) :: d
    type(tecore_attention_args) :: a
    character(len=:), allocatable :: text
    integer(c_int) :: rd
    logical :: zero
    integer(c_int), target :: poison
    a%heads = 7                      ! poisoned, then the constructor's zeros
    a%status = c_loc(poison)
    a%q%token_stride = 99
    a = tecore_attention_args()
    zero = a%batch == 0 .and. a%heads == 0 .and. a%scale == 0 .and. a%q%token_stride == 0 .and. &
           .not. c_associated(a%status) .and. d%hidden == 0 .and. d%epsilon == 0 .and. &
           d%rotary_dim == 0 .and. .not. c_associated(d%tp_ctx)
    ! a zeroed call is refused with a reason, the text an allocatable string
    rd = tecore_attention_describe(a, 0_c_int, text)
    call ok(zero .and. rd /= TECORE_SUCCESS .and. len(tecore_last_error()) > 0, 'defaults', &
            'a declared or constructed bind(C) type is not all zero')
  end subroutine test_defaults

  ! ---- harness --------------------------------------------------------------

  subroutine seed_rng()
    character(len=32) :: env
    integer :: st, len_env
    integer(c_int64_t) :: clk
    call get_environment_variable('TE_TEST_SEED', env, len_env, st)
    if (st == 0 .and. len_env > 0) then
      read (env, *) rng
    else
      call system_clock(clk)
      rng = mod(clk, 1000000007_c_int64_t) + 1
    end if
    print '(a,i0)', '# seed ', rng
    if (rng == 0) rng = 1
  end subroutine seed_rng

  ! xorshift64: a uniform real in [lo, hi)
  real(c_float) function uniform(lo, hi)
    real, intent(in) :: lo, hi
    rng = ieor(rng, ishft(rng, 13))
    rng = ieor(rng, ishft(rng, -7))
    rng = ieor(rng, ishft(rng, 17))
    uniform = real(lo + (hi - lo) * real(iand(ishft(rng, -11), 2_c_int64_t**24 - 1)) / 2.0**24, c_float)
  end function uniform

  subroutine ok(pass, name, detail)
    logical, intent(in) :: pass
    character(len=*), intent(in) :: name, detail
    ntest = ntest + 1
    if (pass) then
      print '(a,i0,a)', 'ok ', ntest, ' - ' // name
    else
      nfail = nfail + 1
      print '(a,i0,a)', 'not ok ', ntest, ' - ' // name
      print '(a)', '# ' // detail
    end if
  end subroutine ok

  ! a call that must succeed: on failure, a diagnostic and the run stops
  subroutine check(res, what)
    integer(c_int), intent(in) :: res
    character(len=*), intent(in) :: what
    if (res /= TECORE_SUCCESS) then
      print '(a)', 'Bail out! ' // what // ': ' // tecore_result_name(res) // ': ' // tecore_last_error()
      stop 1
    end if
  end subroutine check

  function backend() result(s)
    character(len=:), allocatable :: s
    integer(c_int) :: b
    call check(tecore_backend(b), 'backend')
    s = tecore_backend_name(b)
  end function backend

  ! ---- the reference ------------------------------------------------------

  ! E4M3 of a (float32) value: round to nearest even on the value's grid
  ! (step 2^(e-3) for normals, 2^-9 below 2^-6), saturate at +-448
  real(c_float) function ref_e4m3(v)
    real(c_float), intent(in) :: v
    real(c_float) :: a, step
    a = abs(v)
    if (a < 2.0**(-6)) then
      step = 2.0**(-9)
    else
      step = 2.0**(exponent(a) - 1 - 3)
    end if
    a = min(real(ieee_rint(a / step) * step, c_float), 448.0_c_float)
    ref_e4m3 = sign(a, v)
  end function ref_e4m3

  ! the value of an E4M3 byte (S.EEEE.MMM, bias 7)
  real(c_float) function e4m3_value(b)
    integer(c_int8_t), intent(in) :: b
    integer :: u, e, m
    u = iand(int(b), 255)
    e = iand(ishft(u, -3), 15)
    m = iand(u, 7)
    if (e == 15 .and. m == 7) then
      e4m3_value = ieee_value_nan()
    else if (e == 0) then
      e4m3_value = real(m, c_float) * 2.0**(-9)
    else
      e4m3_value = (1.0 + real(m, c_float) / 8.0) * 2.0**(e - 7)
    end if
    if (iand(u, 128) /= 0) e4m3_value = -e4m3_value
  end function e4m3_value

  real(c_float) function ieee_value_nan()
    ieee_value_nan = transfer(int(z'7fc00000', c_int32_t), 0.0_c_float)
  end function ieee_value_nan

  ! ---- device helpers -------------------------------------------------------

  subroutine h2d(dst, src, bytes)
    integer(tecore_devptr_t), intent(in) :: dst
    type(c_ptr), intent(in) :: src
    integer, intent(in) :: bytes
    call check(tecore_memcpy_async(dst, tecore_f_devptr(src), int(bytes, c_size_t), stream), 'h2d')
    call check(tecore_stream_synchronize(stream), 'h2d sync')
  end subroutine h2d

  subroutine d2h(dst, src, bytes)
    type(c_ptr), intent(in) :: dst
    integer(tecore_devptr_t), intent(in) :: src
    integer, intent(in) :: bytes
    call check(tecore_memcpy_async(tecore_f_devptr(dst), src, int(bytes, c_size_t), stream), 'd2h')
    call check(tecore_stream_synchronize(stream), 'd2h sync')
  end subroutine d2h

  subroutine qbufs_make(b)
    type(qbufs), intent(out) :: b
    integer(c_size_t), target :: shape(2)
    call check(tecore_mem_alloc(int(4 * n, c_size_t), b%x), 'alloc x')
    call check(tecore_mem_alloc(int(n, c_size_t), b%q), 'alloc q')
    call check(tecore_mem_alloc(4_c_size_t, b%scale), 'alloc scale')
    call check(tecore_mem_alloc(4_c_size_t, b%scale_inv), 'alloc scale_inv')
    call check(tecore_mem_alloc(4_c_size_t, b%amax), 'alloc amax')
    ! C's shape is [rows][cols]: the last dimension is the contiguous one
    shape = [int(rows, c_size_t), int(cols, c_size_t)]
    call check(tecore_tensor_init(b%tin, TECORE_DTYPE_F32, 2, shape, b%x), 'tensor_init in')
    call check(tecore_tensor_init(b%tout, TECORE_DTYPE_E4M3, 2, shape, b%q), 'tensor_init out')
    b%tout%scaling = TECORE_SCALING_DELAYED
    b%tout%scale = b%scale
    b%tout%scale_inv = b%scale_inv
    b%tout%amax = b%amax
  end subroutine qbufs_make

  subroutine qbufs_free(b)
    type(qbufs), intent(inout) :: b
    call check(tecore_mem_free(b%x), 'free x')
    call check(tecore_mem_free(b%q), 'free q')
    call check(tecore_mem_free(b%scale), 'free scale')
    call check(tecore_mem_free(b%scale_inv), 'free scale_inv')
    call check(tecore_mem_free(b%amax), 'free amax')
  end subroutine qbufs_free

  ! fresh random x and scale on the device, the outputs poisoned (q bytes
  ! 0x7f = NaN in E4M3, scale_inv NaN) and amax 0 (delayed scaling
  ! max-accumulates into it)
  subroutine qbufs_fill(b, x, scale)
    type(qbufs), intent(in) :: b
    real(c_float), target, intent(out) :: x(cols, rows)
    real(c_float), target, intent(out) :: scale
    real(c_float), target :: zero
    integer :: i, j
    do j = 1, rows
      do i = 1, cols
        x(i, j) = uniform(-4.0, 4.0)
        ! every 7th tiny: x*scale lands on E4M3's subnormals (below 2^-6);
        ! every 11th an outlier, which mostly saturates at 448
        if (mod(i + j, 7) == 0) x(i, j) = x(i, j) * 2e-5
        if (mod(i * j, 11) == 0) x(i, j) = x(i, j) * 4
      end do
    end do
    scale = uniform(30.0, 110.0)   ! |x| * scale below 448 but for the outliers
    zero = 0
    call h2d(b%x, c_loc(x), 4 * n)
    call h2d(b%scale, c_loc(scale), 4)
    call h2d(b%amax, c_loc(zero), 4)
    call check(tecore_memset_d8_async(b%q, int(z'7f', c_int8_t), int(n, c_size_t), stream), 'poison q')
    call check(tecore_memset_d32_async(b%scale_inv, int(z'7fc00000', c_int32_t), 1_c_size_t, stream), &
               'poison scale_inv')
    call check(tecore_stream_synchronize(stream), 'poison sync')
  end subroutine qbufs_fill

  ! compares the device outputs with the reference of x and scale: pass,
  ! or msg says the first difference
  subroutine qbufs_verify(b, x, scale, pass, msg)
    type(qbufs), intent(in) :: b
    real(c_float), intent(in) :: x(cols, rows), scale
    logical, intent(out) :: pass
    character(len=*), intent(out) :: msg
    integer(c_int8_t), target :: q(cols, rows)
    real(c_float), target :: scale_inv, amax
    real(c_float) :: want, got
    integer :: i, j, bad, sat, sub
    call d2h(c_loc(q), b%q, n)
    call d2h(c_loc(scale_inv), b%scale_inv, 4)
    call d2h(c_loc(amax), b%amax, 4)
    bad = 0
    sat = 0
    sub = 0
    msg = ''
    do j = 1, rows
      do i = 1, cols
        want = ref_e4m3(x(i, j) * scale)
        got = e4m3_value(q(i, j))
        if (abs(want) == 448.0) sat = sat + 1
        if (abs(want) < 2.0**(-6)) sub = sub + 1
        if (.not. (got == want)) then   ! NaN (poison left) fails too
          if (bad == 0) write (msg, '(a,i0,a,i0,a,es14.6,a,es14.6,a,es14.6)') 'row ', j - 1, &
              ' col ', i - 1, ': x*scale ', x(i, j) * scale, ' got ', got, ' want ', want
          bad = bad + 1
        end if
      end do
    end do
    print '(a,i0,a,i0,a,i0,a,es12.4)', '# ', sat, ' of ', n, ' values saturated at 448, ', sub, &
      ' subnormal; scale ', scale
    pass = bad == 0
    if (.not. pass) then
      write (msg, '(a,i0,a)') trim(msg) // ' (', bad, ' values differ)'
    else if (.not. (abs(scale_inv - 1.0 / scale) <= 1e-6 * (1.0 / scale))) then
      write (msg, '(a,es14.6,a,es14.6)') 'scale_inv ', scale_inv, ' want ', 1.0 / scale
      pass = .false.
    else if (.not. (amax == maxval(abs(x)))) then
      write (msg, '(a,es14.6,a,es14.6)') 'amax ', amax, ' want ', maxval(abs(x))
      pass = .false.
    end if
  end subroutine qbufs_verify

  ! ---- the tests --------------------------------------------------------------

  subroutine test_strings()
    type(tecore_tensor) :: t
    character(len=:), allocatable :: detail
    logical :: pass
    integer(c_int) :: res
    pass = tecore_result_name(TECORE_ERR_INVALID) == 'TECORE_ERR_INVALID'
    pass = pass .and. tecore_dtype_name(TECORE_DTYPE_E4M3) == 'e4m3'
    pass = pass .and. len(tecore_version_string()) > 0
    t%ndim = 99   ! out of range: refused, with a detail naming the field
    t%dtype = TECORE_DTYPE_F32
    t%scaling = TECORE_SCALING_NONE
    res = tecore_tensor_validate(t, 0)
    detail = tecore_last_error()
    pass = pass .and. res == TECORE_ERR_INVALID .and. index(detail, 'ndim') > 0
    call ok(pass, 'strings: names, version and last error as Fortran strings', &
            'result ' // tecore_result_name(res) // ' detail "' // detail // '" version "' // &
            tecore_version_string() // '"')
  end subroutine test_strings

  subroutine test_quantize()
    type(qbufs) :: b
    real(c_float), target :: x(cols, rows), scale
    logical :: pass
    character(len=200) :: msg
    call qbufs_make(b)
    call qbufs_fill(b, x, scale)
    call check(tecore_quantize(b%tin, b%tout, 0_tecore_devptr_t, stream), 'quantize')
    call check(tecore_stream_synchronize(stream), 'quantize sync')
    call qbufs_verify(b, x, scale, pass, msg)
    call ok(pass, 'quantize: E4M3 values equal the reference exactly, scale_inv (rel 1e-6), amax', &
            trim(msg))
    call qbufs_free(b)
  end subroutine test_quantize

  subroutine test_graph()
    type(qbufs) :: b
    type(c_ptr) :: g
    real(c_float), target :: x(cols, rows), scale
    integer(c_size_t) :: nodes
    integer :: replay
    logical :: pass, all_pass
    character(len=200) :: msg, first_msg
    call qbufs_make(b)
    call check(tegraph_graph_create(0, g), 'graph_create')
    call check(tegraph_graph_begin_capture(g, stream, TECORE_CAPTURE_GLOBAL, 0), 'begin_capture')
    call check(tecore_quantize(b%tin, b%tout, 0_tecore_devptr_t, stream), 'quantize (captured)')
    ! info left out: an absent optional argument reaches C as NULL
    call check(tegraph_graph_end_capture(g), 'end_capture')
    call check(tegraph_graph_node_count(g, nodes), 'node_count')
    print '(a,i0,a)', '# captured ', nodes, ' nodes'
    all_pass = nodes > 0
    first_msg = 'the graph has no nodes'
    if (all_pass) first_msg = ''
    do replay = 1, 2
      call qbufs_fill(b, x, scale)   ! new inputs: the replay must read them
      call check(tegraph_graph_launch(g, stream), 'graph_launch')
      call check(tecore_stream_synchronize(stream), 'replay sync')
      call qbufs_verify(b, x, scale, pass, msg)
      if (.not. pass .and. all_pass) write (first_msg, '(a,i0,a)') 'replay ', replay, ': ' // trim(msg)
      all_pass = all_pass .and. pass
    end do
    call ok(all_pass, 'graph: captured quantize replayed twice on fresh inputs equals the reference', &
            trim(first_msg))
    call check(tegraph_graph_destroy(g), 'graph_destroy')
    call qbufs_free(b)
  end subroutine test_graph

  subroutine test_tensor_init()
    type(tecore_tensor) :: t
    integer(c_size_t) :: shape(3), r2, c2
    shape = [3_c_size_t, 5_c_size_t, 7_c_size_t]
    t%shape = 99
    call check(tecore_tensor_init(t, TECORE_DTYPE_BF16, 3, shape, 4096_tecore_devptr_t), 'tensor_init')
    call check(tecore_tensor_2d(t, r2, c2), 'tensor_2d')
    call ok(t%ndim == 3 .and. all(t%shape(1:3) == shape) .and. t%data == 4096 .and. &
            tecore_tensor_numel(t) == 105 .and. r2 == 15 .and. c2 == 7 .and. t%dtype == TECORE_DTYPE_BF16, &
            'tensor_init: the bind(C) type reads back as C wrote it', 'fields differ')
  end subroutine test_tensor_init

  subroutine test_convert()
    integer(c_int8_t) :: bytes(256), q(n)
    real(c_float) :: got(256), x(n)
    integer :: i, bad
    character(len=160) :: msg
    do i = 1, 256
      bytes(i) = int(i - 1 - merge(256, 0, i > 128), c_int8_t)
    end do
    got = -1
    call check(tecore_cvt_e4m3_to_f32(bytes, got, 256_c_size_t), 'cvt_e4m3_to_f32')
    bad = 0
    msg = ''
    do i = 1, 256
      if (.not. (got(i) == e4m3_value(bytes(i)) .or. &
                 (got(i) /= got(i) .and. e4m3_value(bytes(i)) /= e4m3_value(bytes(i))))) then
        if (bad == 0) write (msg, '(a,i0,a,es14.6,a,es14.6)') 'byte ', i - 1, ' got ', got(i), &
            ' want ', e4m3_value(bytes(i))
        bad = bad + 1
      end if
    end do
    do i = 1, n
      x(i) = uniform(-500.0, 500.0)
      if (mod(i, 5) == 0) x(i) = x(i) * 1e-4
    end do
    q = int(z'7f', c_int8_t)
    call check(tecore_cvt_f32_to_e4m3(x, q, int(n, c_size_t)), 'cvt_f32_to_e4m3')
    do i = 1, n
      if (.not. (e4m3_value(q(i)) == ref_e4m3(x(i)))) then
        if (bad == 0) write (msg, '(a,es14.6,a,es14.6,a,es14.6)') 'x ', x(i), ' got ', &
            e4m3_value(q(i)), ' want ', ref_e4m3(x(i))
        bad = bad + 1
      end if
    end do
    call ok(bad == 0, 'convert: E4M3 host conversions through array arguments (exact)', trim(msg))
  end subroutine test_convert

end program check_fortran
