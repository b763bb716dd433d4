/* SPDX-License-Identifier: Apache-2.0 */
/* check_vmm.c -- virtual memory management and multicast (te/device.h):
 *   - granularity; reserve / create / map / set_access / unmap / release /
 *     free_va with data through the mappings (two handles side by side, one
 *     handle mapped twice, a handle released while still mapped);
 *   - export to a POSIX fd in one process and import in another: the other
 *     process is forked before this one touches the device (on cuda a
 *     context does not survive fork), gets the fd over a socketpair
 *     (SCM_RIGHTS), checks the data the parent wrote and writes its answer,
 *     which the parent checks;
 *   - multicast: refused with TECORE_ERR_DISABLED on cuda when
 *     NCCL_NVLS_ENABLE=0 (tests.h sets it; this file never unsets it on
 *     cuda); create / add / bind / unbind / release on vdev. */
#include "tests.h"
#include <sys/socket.h>
#include <sys/uio.h>

/* A byte stream from a seed, the same in both processes. */
static void pattern(unsigned char *p, size_t n, uint64_t seed) {
  uint64_t x = seed;
  for (size_t i = 0; i < n; i += 8) {
    uint64_t v = te_splitmix64(&x);
    memcpy(p + i, &v, n - i < 8 ? n - i : 8);
  }
}

START_TEST(granularity) {
  size_t gmin = 0, grec = 0;
  TE_OK(tecore_vmm_granularity(&gmin, 0));
  TE_OK(tecore_vmm_granularity(&grec, 1));
  ck_assert_uint_gt(gmin, 0);
  ck_assert_msg((gmin & (gmin - 1)) == 0, "granularity %zu is not a power of 2", gmin);
  ck_assert_uint_ge(grec, gmin);
  ck_assert_uint_eq(grec % gmin, 0);
  ck_assert_int_eq(te_props.vmm_supported, 1);
}
END_TEST

/* Maps h1 and h2 side by side at va, and h1 again at va + 2g. */
START_TEST(map_and_use) {
  size_t g = 0;
  TE_OK(tecore_vmm_granularity(&g, 0));
  tecore_devptr_t va = 0;
  TE_OK(tecore_vmm_reserve(4 * g, 0, &va));
  ck_assert_uint_ne(va, 0);
  ck_assert_uint_eq(va % g, 0);
  tecore_vmm_handle_t h1 = 0, h2 = 0;
  TE_OK(tecore_vmm_create(g, 0, &h1));
  TE_OK(tecore_vmm_create(g, 0, &h2));
  ck_assert_uint_ne(h1, h2);
  TE_OK(tecore_vmm_map(va, g, h1, 0));
  TE_OK(tecore_vmm_map(va + g, g, h2, 0));
  TE_OK(tecore_vmm_map(va + 2 * g, g, h1, 0));
  /* access is set per mapping, as the driver wants whole mappings */
  for (int i = 0; i < 3; i++) TE_OK(tecore_vmm_set_access(va + (size_t)i * g, g, 0));

  /* random data across the seam between two allocations */
  unsigned char *src = malloc(2 * g), *dst = malloc(2 * g);
  te_rand_bytes(src, 2 * g);
  te_poison_host(dst, 2 * g);
  te_h2d(va, src, 2 * g);
  te_d2h(dst, va, 2 * g);
  te_expect_mem_eq(dst, src, 2 * g, "two mappings side by side");
  /* the second view of h1 shows what the first wrote */
  te_poison_host(dst, g);
  te_d2h(dst, va + 2 * g, g);
  te_expect_mem_eq(dst, src, g, "h1 through its second mapping");

  /* kernels see the mappings too */
  size_t n = 2 * g / 4;
  float v = te_rand_float(1, 2);
  TE_OK(tecore_fill(va, TECORE_DTYPE_F32, n, v, te_stream));
  float *f = malloc(2 * g);
  te_poison_host_nan(f, n);
  te_d2h(f, va, 2 * g);
  for (size_t i = 0; i < n; i++) ck_assert_msg(f[i] == v, "f[%zu] = %g, want %g", i,
                                               (double)f[i], (double)v);
  te_d2h(f, va + 2 * g, g);
  for (size_t i = 0; i < g / 4; i++) ck_assert_float_eq(f[i], v);

  /* released handles stay valid while mapped (the driver frees on unmap) */
  TE_OK(tecore_vmm_release(h1));
  TE_OK(tecore_vmm_release(h2));
  te_rand_bytes(src, g);
  te_h2d(va + g, src, g);
  te_poison_host(dst, g);
  te_d2h(dst, va + g, g);
  te_expect_mem_eq(dst, src, g, "h2 after release, still mapped");

  for (int i = 0; i < 3; i++) TE_OK(tecore_vmm_unmap(va + (size_t)i * g, g));
  TE_OK(tecore_vmm_free_va(va, 4 * g));
  free(src);
  free(dst);
  free(f);
}
END_TEST

START_TEST(export_needs_flag) {
  size_t g = 0;
  TE_OK(tecore_vmm_granularity(&g, 0));
  tecore_vmm_handle_t h = 0;
  TE_OK(tecore_vmm_create(g, 0, &h));
  int fd = -1;
  TE_EXPECT_FAIL(tecore_vmm_export_fd(h, &fd));
  ck_assert_int_lt(fd, 0);
  TE_OK(tecore_vmm_release(h));
  /* with the flag: a new fd each time, the caller's to close */
  TE_OK(tecore_vmm_create(g, TECORE_VMM_EXPORT_POSIX_FD, &h));
  int fd1 = -1, fd2 = -1;
  TE_OK(tecore_vmm_export_fd(h, &fd1));
  TE_OK(tecore_vmm_export_fd(h, &fd2));
  ck_assert_int_ge(fd1, 0);
  ck_assert_int_ge(fd2, 0);
  ck_assert_int_ne(fd1, fd2);
  /* importing in the same process gives a handle to the same memory */
  tecore_vmm_handle_t hi = 0;
  TE_OK(tecore_vmm_import_fd(fd1, &hi));
  ck_assert_int_ne(fcntl(fd1, F_GETFD), -1); /* the fd is still ours */
  tecore_devptr_t va = 0;
  TE_OK(tecore_vmm_reserve(2 * g, 0, &va));
  TE_OK(tecore_vmm_map(va, g, h, 0));
  TE_OK(tecore_vmm_map(va + g, g, hi, 0));
  TE_OK(tecore_vmm_set_access(va, g, 0));
  TE_OK(tecore_vmm_set_access(va + g, g, 0));
  unsigned char *src = malloc(g), *dst = malloc(g);
  te_rand_bytes(src, g);
  te_h2d(va, src, g);
  te_poison_host(dst, g);
  te_d2h(dst, va + g, g);
  te_expect_mem_eq(dst, src, g, "imported view of an exported handle");
  TE_OK(tecore_vmm_unmap(va, g));
  TE_OK(tecore_vmm_unmap(va + g, g));
  TE_OK(tecore_vmm_free_va(va, 2 * g));
  TE_OK(tecore_vmm_release(hi));
  TE_OK(tecore_vmm_release(h));
  close(fd1);
  close(fd2);
  free(src);
  free(dst);
}
END_TEST

/* ---- export in this process, import in a forked one ---- */

struct ipc_msg {
  size_t bytes;
  uint64_t seed_parent, seed_child;
};

static int ipc_sock = -1;
static pid_t ipc_child = -1;

static int send_fd(int sock, int fd, const void *data, size_t len) {
  struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                     .msg_controllen = sizeof u.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  return sendmsg(sock, &m, 0) == (ssize_t)len ? 0 : -1;
}

static int recv_fd(int sock, void *data, size_t len) {
  struct iovec iov = {.iov_base = data, .iov_len = len};
  union {
    char buf[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } u;
  struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                     .msg_controllen = sizeof u.buf};
  if (recvmsg(sock, &m, MSG_WAITALL) != (ssize_t)len) return -1;
  struct cmsghdr *c = CMSG_FIRSTHDR(&m);
  if (!c || c->cmsg_type != SCM_RIGHTS) return -1;
  int fd;
  memcpy(&fd, CMSG_DATA(c), sizeof(int));
  return fd;
}

/* Sends a one-line answer ("ok" or what went wrong) to the parent. */
static void child_say(int sock, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  if ((size_t)n >= sizeof line) n = sizeof line - 1;
  line[n] = '\0';
  if (write(sock, line, (size_t)n + 1) < 0) _exit(3);
}

#define CHILD_OK(call)                                                                  \
  do {                                                                                  \
    tecore_result_t r_ = (call);                                                        \
    if (r_ != TECORE_SUCCESS) {                                                         \
      child_say(sock, "child: %s: %s: %s", #call, tecore_result_name(r_),               \
                tecore_last_error());                                                   \
      _exit(2);                                                                         \
    }                                                                                   \
  } while (0)

/* The importing process: never used the device before this point. */
static void ipc_child_main(int sock) {
  struct ipc_msg msg;
  int fd = recv_fd(sock, &msg, sizeof msg);
  if (fd < 0) _exit(0); /* the parent went away (a failed test): nothing to do */
  CHILD_OK(tecore_init());
  tecore_ctx_t ctx;
  CHILD_OK(tecore_ctx_create(0, &ctx));
  tecore_stream_t s;
  CHILD_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_vmm_handle_t h = 0;
  CHILD_OK(tecore_vmm_import_fd(fd, &h));
  close(fd);
  tecore_devptr_t va = 0;
  CHILD_OK(tecore_vmm_reserve(msg.bytes, 0, &va));
  CHILD_OK(tecore_vmm_map(va, msg.bytes, h, 0));
  CHILD_OK(tecore_vmm_set_access(va, msg.bytes, 0));
  unsigned char *got = malloc(msg.bytes), *want = malloc(msg.bytes);
  memset(got, TE_POISON_BYTE, msg.bytes);
  pattern(want, msg.bytes, msg.seed_parent);
  CHILD_OK(tecore_memcpy_async(te_hptr(got), va, msg.bytes, s));
  CHILD_OK(tecore_stream_synchronize(s));
  for (size_t i = 0; i < msg.bytes; i++)
    if (got[i] != want[i]) {
      child_say(sock, "child: byte %zu of %zu is 0x%02x, want 0x%02x", i, msg.bytes, got[i],
                want[i]);
      _exit(2);
    }
  /* the answer: the child's own pattern over the whole range */
  pattern(want, msg.bytes, msg.seed_child);
  CHILD_OK(tecore_memcpy_async(va, te_hptr(want), msg.bytes, s));
  CHILD_OK(tecore_stream_synchronize(s));
  CHILD_OK(tecore_vmm_unmap(va, msg.bytes));
  CHILD_OK(tecore_vmm_free_va(va, msg.bytes));
  CHILD_OK(tecore_vmm_release(h));
  CHILD_OK(tecore_stream_destroy(s));
  CHILD_OK(tecore_ctx_destroy(ctx));
  free(got);
  free(want);
  child_say(sock, "ok");
  _exit(0);
}

/* Forks the importer first, then sets up the device in this process. */
static void ipc_setup(void) {
  int sv[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  fflush(stdout);
  fflush(stderr);
  ipc_child = fork();
  ck_assert_int_ge(ipc_child, 0);
  if (ipc_child == 0) {
    close(sv[0]);
    ipc_child_main(sv[1]);
    _exit(0);
  }
  close(sv[1]);
  ipc_sock = sv[0];
  te_dev_setup();
}

static void ipc_teardown(void) {
  te_dev_teardown();
  if (ipc_sock >= 0) close(ipc_sock);
  ipc_sock = -1;
  if (ipc_child > 0) waitpid(ipc_child, NULL, 0);
  ipc_child = -1;
}

START_TEST(export_import_across_fork) {
  if (!te_test_forking && te_backend_kind == TECORE_BACKEND_CUDA)
    fprintf(stderr, "# CK_FORK=no on cuda: the importer inherits this process's driver state\n");
  size_t g = 0;
  TE_OK(tecore_vmm_granularity(&g, 0));
  size_t bytes = 2 * g;
  tecore_vmm_handle_t h = 0;
  TE_OK(tecore_vmm_create(bytes, TECORE_VMM_EXPORT_POSIX_FD, &h));
  tecore_devptr_t va = 0;
  TE_OK(tecore_vmm_reserve(bytes, 0, &va));
  TE_OK(tecore_vmm_map(va, bytes, h, 0));
  TE_OK(tecore_vmm_set_access(va, bytes, 0));
  struct ipc_msg msg = {.bytes = bytes, .seed_parent = te_rand_u64(), .seed_child = te_rand_u64()};
  unsigned char *buf = malloc(bytes), *want = malloc(bytes);
  pattern(buf, bytes, msg.seed_parent);
  te_h2d(va, buf, bytes);
  int fd = -1;
  TE_OK(tecore_vmm_export_fd(h, &fd));
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(send_fd(ipc_sock, fd, &msg, sizeof msg), 0);
  close(fd);

  char answer[512];
  size_t got = 0;
  ssize_t k;
  while (got < sizeof answer && (k = read(ipc_sock, answer + got, sizeof answer - got)) > 0) {
    got += (size_t)k;
    if (memchr(answer, '\0', got)) break;
  }
  ck_assert_msg(got > 0 && memchr(answer, '\0', got), "the importing process said nothing");
  ck_assert_msg(strcmp(answer, "ok") == 0, "%s", answer);
  int status = 0;
  ck_assert_int_eq(waitpid(ipc_child, &status, 0), ipc_child);
  ipc_child = -1;
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "importer status 0x%x", status);

  /* the importer's answer is in our mapping */
  te_poison_host(buf, bytes);
  te_d2h(buf, va, bytes);
  pattern(want, bytes, msg.seed_child);
  te_expect_mem_eq(buf, want, bytes, "the importing process's answer");
  TE_OK(tecore_vmm_unmap(va, bytes));
  TE_OK(tecore_vmm_free_va(va, bytes));
  TE_OK(tecore_vmm_release(h));
  free(buf);
  free(want);
}
END_TEST

/* ---- multicast ---- */

START_TEST(multicast) {
  tecore_mc_handle_t mc = 0;
  size_t mg = 0;
  if (te_backend_kind == TECORE_BACKEND_CUDA) {
    /* tests.h set NCCL_NVLS_ENABLE=0 (or the machine did): the call must be
     * refused before it reaches the driver */
    const char *v = getenv("NCCL_NVLS_ENABLE");
    ck_assert_msg(v && strcmp(v, "0") == 0, "NCCL_NVLS_ENABLE is not 0 on cuda: not testing");
    TE_EXPECT_ERR(TECORE_ERR_DISABLED, "NCCL_NVLS_ENABLE", tecore_mc_create(1 << 21, 1, 0, &mc));
    ck_assert_uint_eq(mc, 0);
    TE_EXPECT_ERR(TECORE_ERR_DISABLED, NULL, tecore_mc_granularity(1 << 21, 1, &mg));
    setenv("TECOMM_NVLS_ENABLE", "0", 1);
    TE_EXPECT_ERR(TECORE_ERR_DISABLED, NULL, tecore_mc_create(1 << 21, 1, 0, &mc));
    ck_assert_uint_eq(mc, 0);
    return;
  }
  /* vdev: the emulation works with the guard lifted */
  unsetenv("NCCL_NVLS_ENABLE");
  unsetenv("TECOMM_NVLS_ENABLE");
  size_t g = 0;
  TE_OK(tecore_vmm_granularity(&g, 0));
  TE_OK(tecore_mc_granularity(1 << 20, 1, &mg));
  ck_assert_uint_gt(mg, 0);
  size_t unit = mg > g ? mg : g, bytes = 2 * unit;
  TE_OK(tecore_mc_create(bytes, 1, 0, &mc));
  ck_assert_uint_ne(mc, 0);
  int n = 0;
  TE_OK(tecore_device_count(&n));
  TE_EXPECT_INVALID("ordinal", tecore_mc_add_device(mc, n));
  TE_OK(tecore_mc_add_device(mc, 0));
  tecore_vmm_handle_t h = 0;
  TE_OK(tecore_vmm_create(bytes, 0, &h));
  TE_OK(tecore_mc_bind_mem(mc, 0, h, 0, bytes));
  TE_OK(tecore_mc_unbind(mc, 0, 0, bytes));
  TE_OK(tecore_mc_release(mc));
  TE_OK(tecore_vmm_release(h));
}
END_TEST

static Suite *vmm_suite(void) {
  Suite *s = suite_create("vmm");
  TCase *tc = te_tcase(s, "vmm", 1);
  tcase_add_test(tc, granularity);
  tcase_add_test(tc, map_and_use);
  tcase_add_test(tc, export_needs_flag);
  tcase_add_test(tc, multicast);
  tc = tcase_create("ipc");
  tcase_set_timeout(tc, TE_TEST_TIMEOUT);
  tcase_add_checked_fixture(tc, ipc_setup, ipc_teardown);
  tcase_add_test(tc, export_import_across_fork);
  suite_add_tcase(s, tc);
  return s;
}

TE_TEST_MAIN(vmm_suite, TE_TEST_DEVICE)
