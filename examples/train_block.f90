! SPDX-License-Identifier: Apache-2.0
! train_block.f90 -- a transformer block built and trained from Fortran.
!
! One Llama-style block (RMSNorm, grouped-query causal attention with
! RoPE, SwiGLU MLP) appended by tecore_seq_add_transformer learns a task
! that needs attention: each token's target is the mean of its sequence's
! tokens so far (its causal prefix).  A step: forward, the mean squared
! error and its gradient on the host, backward, AdamW.  The inputs are
! fresh random numbers each run; the output buffer is poisoned (NaN)
! before the first forward.  Checked: every loss is finite and the last
! is below a tenth of the first (the margin: a block that learns nothing
! stays near its first loss; this one ends some thousand times lower).
!
! Build and run against an installed libte:
!   gfortran train_block.f90 $(pkg-config --cflags --libs te-fortran) \
!     -Wl,-rpath,"$(pkg-config --variable=libdir te-fortran)" -o train_block
!   ./train_block         (TE_DEVICE=vdev runs it without a GPU)
! Exit 0 when the loss fell, 1 otherwise.
program train_block
  use te_core          ! also brings iso_c_binding
  implicit none
  ! 4 sequences of 16 tokens, 32 features; 4 query heads over 2 KV heads
  integer, parameter :: batch = 4, seq_len = 16, rows = batch * seq_len, hid = 32, steps = 60
  real(c_float), target :: x(hid, rows), y(hid, rows), dy(hid, rows)
  real(c_double) :: target(hid, rows), loss, first
  integer(c_size_t) :: shape(2), np, i
  integer(c_size_t), parameter :: nbytes = 4 * hid * rows
  type(tecore_tensor) :: tx, ty, tdy
  type(tecore_seq_config) :: cfg
  type(tecore_transformer_desc) :: block   ! every field 0: the defaults
  type(tecore_adam_config) :: adam
  type(tecore_seq_param), allocatable :: p(:)
  type(tecore_optim_tensor), allocatable :: ot(:)
  type(c_ptr) :: seq
  integer(tecore_devptr_t) :: dx, dyo, ddy
  character(len=:), allocatable :: plan
  integer :: step, b, t, r

  call random_seed()
  call random_number(x)
  x = 2 * x - 1
  ! the target: the running mean of each feature over the sequence so far
  do b = 0, batch - 1
    r = b * seq_len
    target(:, r + 1) = x(:, r + 1)
    do t = 2, seq_len
      target(:, r + t) = (target(:, r + t - 1) * (t - 1) + x(:, r + t)) / t
    end do
  end do

  call try(tecore_init(), 'tecore_init')
  ! C shapes are row-major: [rows][hid] is Fortran's x(hid, rows)
  shape = [int(rows, c_size_t), int(hid, c_size_t)]
  call try(tecore_mem_alloc(nbytes, dx), 'alloc x')
  call try(tecore_mem_alloc(nbytes, dyo), 'alloc y')
  call try(tecore_mem_alloc(nbytes, ddy), 'alloc dy')
  call try(tecore_tensor_init(tx, TECORE_DTYPE_F32, 2, shape, dx), 'tensor x')
  call try(tecore_tensor_init(ty, TECORE_DTYPE_F32, 2, shape, dyo), 'tensor y')
  call try(tecore_tensor_init(tdy, TECORE_DTYPE_F32, 2, shape, ddy), 'tensor dy')
  ! host addresses pass as device addresses (unified addressing)
  call try(tecore_memcpy(dx, tecore_f_devptr(c_loc(x)), nbytes), 'copy x')
  call try(tecore_memset_d8_async(dyo, -1_c_int8_t, nbytes, c_null_ptr), 'poison y')

  ! the layer: one transformer block in a fuser sequence of F32 tokens
  cfg%rows = rows
  cfg%features = hid
  cfg%dtype = TECORE_DTYPE_F32
  cfg%seed = 1
  call try(tecore_seq_create(cfg, seq), 'seq_create')
  block%hidden = hid
  block%heads = 4
  block%kv_heads = 2
  block%ffn = 64
  block%norm = TECORE_OP_RMSNORM
  block%activation = TECORE_OP_SWIGLU
  block%rope = 1
  block%attn_flags = TECORE_ATTN_CAUSAL
  block%batch = batch
  block%max_seqlen = seq_len
  call try(tecore_seq_add_transformer(seq, block), 'seq_add_transformer')
  call try(tecore_seq_build(seq, c_null_ptr), 'seq_build')
  call try(tecore_seq_describe(seq, TECORE_SEQ_FORWARD_VALUE, plan), 'seq_describe')
  print '(a)', 'train_block: ' // plan

  ! the optimizer's view of the parameters (an F32 sequence's values are
  ! the master weights, updated in place) and AdamW's moments from 0
  np = 0
  call try(tecore_seq_params(seq, max=0_c_size_t, count=np), 'seq_params (count)')
  allocate(p(np), ot(np))
  call try(tecore_seq_params(seq, p, np, np), 'seq_params')
  do i = 1, np
    ot(i)%numel = tecore_tensor_numel(p(i)%value)
    ot(i)%param = p(i)%value%data
    ot(i)%grad = p(i)%grad%data
    ot(i)%grad_dtype = TECORE_DTYPE_F32
    call try(tecore_mem_alloc(4 * ot(i)%numel, ot(i)%exp_avg), 'alloc exp_avg')
    call try(tecore_mem_alloc(4 * ot(i)%numel, ot(i)%exp_avg_sq), 'alloc exp_avg_sq')
    call try(tecore_memset_d32_async(ot(i)%exp_avg, 0_c_int32_t, ot(i)%numel, c_null_ptr), 'zero m')
    call try(tecore_memset_d32_async(ot(i)%exp_avg_sq, 0_c_int32_t, ot(i)%numel, c_null_ptr), &
      & 'zero v')
  end do
  adam%lr = 1e-2
  adam%beta1 = 0.9
  adam%beta2 = 0.999
  adam%eps = 1e-8
  adam%weight_decay = 0.01
  adam%flags = TECORE_ADAM_W

  ! training: forward, loss, backward, step
  first = 0
  do step = 1, steps
    call try(tecore_seq_zero_grad(seq, c_null_ptr), 'seq_zero_grad')
    call try(tecore_seq_forward(seq, tx, ty, 0_tecore_devptr_t, c_null_ptr), 'seq_forward')
    call try(tecore_ctx_synchronize(), 'synchronize')
    call try(tecore_memcpy(tecore_f_devptr(c_loc(y)), dyo, nbytes), 'copy y')
    loss = sum((y - target)**2) / (rows * hid)
    dy = real(2 * (y - target) / (rows * hid), c_float)
    call try(tecore_memcpy(ddy, tecore_f_devptr(c_loc(dy)), nbytes), 'copy dy')
    call try(tecore_seq_backward(seq, tdy, stream=c_null_ptr), 'seq_backward')
    adam%step = step
    call try(tecore_adam_step(ot, np, adam, 0_tecore_devptr_t, 0_tecore_devptr_t, c_null_ptr), &
      & 'adam_step')
    if (.not. (abs(loss) <= huge(loss))) then
      print '(a,i0,a)', 'train_block: step ', step, ': the loss is not finite'
      error stop 1
    end if
    if (step == 1) first = loss
    if (step == 1 .or. mod(step, 10) == 0) &
      & print '(a,i2,a,f9.6)', 'train_block: step ', step, '  loss ', loss
  end do

  ! clean up: the sequence frees what it allocated, the caller the rest
  call try(tecore_ctx_synchronize(), 'synchronize')
  do i = 1, np
    call try(tecore_mem_free(ot(i)%exp_avg), 'free')
    call try(tecore_mem_free(ot(i)%exp_avg_sq), 'free')
  end do
  call try(tecore_seq_destroy(seq), 'seq_destroy')
  call try(tecore_mem_free(dx), 'free')
  call try(tecore_mem_free(dyo), 'free')
  call try(tecore_mem_free(ddy), 'free')
  deallocate(p, ot, plan)
  if (.not. (loss < 0.1 * first)) then
    print '(a,f9.6,a,f9.6,a)', 'train_block: the loss went from ', first, ' to ', loss, &
      & ': not below a tenth'
    error stop 1
  end if
  print '(a,f9.6,a,f9.6,a,i0,a)', 'train_block: the loss fell from ', first, ' to ', loss, ' in ', &
    & steps, ' steps'

contains

  ! every libtecore call returns a result code; the detail is per thread
  subroutine try(r, what)
    integer(c_int), intent(in) :: r
    character(len=*), intent(in) :: what
    if (r /= TECORE_SUCCESS) then
      print '(a)', 'train_block: ' // what // ': ' // tecore_strerror(r) // ': ' // &
        & tecore_last_error()
      error stop 1
    end if
  end subroutine try
end program train_block
