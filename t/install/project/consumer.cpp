// SPDX-License-Identifier: Apache-2.0
// t/install/project/consumer.cpp -- a C++ program built by make installcheck
// with CMake against the INSTALLED libte: find_package(libte CONFIG
// REQUIRED) and the imported targets libte::graph and libte::comm, which
// bring libte::core with them (t/install/installcheck-cmake.sh).  It proves that
// the CMake package finds headers and libraries, that the headers compile
// as C++, and that the installed libtecore quantizes right.
//
// The check: 3000 random floats (seed printed; TE_SEED repeats a run) in
// [-100, 100) are quantized to E5M2 with delayed scaling at scale 0.5,
// then dequantized, outputs poisoned first (0xff bytes).  Asserted:
// scale_inv is exactly 2; amax (max-accumulated into 0) is max|x|; each
// dequantized value is within E5M2's half step of x (2^-3 relative, or
// 2^-17 * scale_inv absolute in the subnormal range).
// Exit 0 pass, 1 fail (the reason on stderr).
#include <te/core.h>
#include <te/graph.h>
#include <te/comm.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

// Throws with libte's detail string when a call fails.
void check(tecore_result_t r, const char *what) {
  if (r != TECORE_SUCCESS)
    throw std::runtime_error(std::string(what) + ": " + tecore_last_error());
}

// Device memory freed when it goes out of scope.
struct DeviceBuffer {
  tecore_devptr_t ptr = 0;
  explicit DeviceBuffer(size_t bytes) { check(tecore_mem_alloc(bytes, &ptr), "tecore_mem_alloc"); }
  ~DeviceBuffer() { tecore_mem_free(ptr); }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
};

template <class T> tecore_devptr_t host(T *p) { return (tecore_devptr_t)(uintptr_t)p; }

int run() {
  const size_t rows = 30, cols = 100, n = rows * cols;
  const char *env = std::getenv("TE_SEED");
  unsigned seed = env ? (unsigned)std::strtoul(env, nullptr, 0) : std::random_device{}();
  std::printf("consumer.cpp: seed %u\n", seed);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-100.f, 100.f);
  std::vector<float> x(n), y(n);
  float amax = 0.f;
  for (float &v : x) {
    v = dist(gen);
    amax = std::fmax(amax, std::fabs(v));
  }

  int gmaj, gmin, gpat, cmaj, cmin, cpat;
  tegraph_version(&gmaj, &gmin, &gpat);
  tecomm_version(&cmaj, &cmin, &cpat);
  if (gmaj != TECORE_VERSION_MAJOR || cmaj != TECORE_VERSION_MAJOR || gmin != cmin)
    throw std::runtime_error("libtegraph and libtecomm report different versions");

  DeviceBuffer dx(n * sizeof(float)), dq(n), dy(n * sizeof(float)), damax(4), dscale(4), dsinv(4);
  const float scale = 0.5f, zero = 0.f;
  check(tecore_memcpy(dx.ptr, host(x.data()), n * sizeof(float)), "upload x");
  check(tecore_memcpy(dscale.ptr, host(&scale), 4), "upload scale");
  check(tecore_memcpy(damax.ptr, host(&zero), 4), "upload amax");
  check(tecore_memset_d8_async(dq.ptr, 0xff, n, nullptr), "poison q");
  check(tecore_memset_d8_async(dy.ptr, 0xff, n * sizeof(float), nullptr), "poison y");
  check(tecore_memset_d8_async(dsinv.ptr, 0xff, 4, nullptr), "poison scale_inv");

  const size_t shape[2] = {rows, cols};
  tecore_tensor in, q, out;
  check(tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, dx.ptr), "tensor in");
  check(tecore_tensor_init(&q, TECORE_DTYPE_E5M2, 2, shape, dq.ptr), "tensor q");
  check(tecore_tensor_init(&out, TECORE_DTYPE_F32, 2, shape, dy.ptr), "tensor out");
  q.scaling = TECORE_SCALING_DELAYED;
  q.scale = dscale.ptr;
  q.scale_inv = dsinv.ptr;
  q.amax = damax.ptr;
  check(tecore_quantize(&in, &q, 0, nullptr), "tecore_quantize");
  check(tecore_dequantize(&q, &out, nullptr), "tecore_dequantize");
  check(tecore_ctx_synchronize(), "tecore_ctx_synchronize");

  float got_amax, scale_inv;
  check(tecore_memcpy(host(y.data()), dy.ptr, n * sizeof(float)), "download y");
  check(tecore_memcpy(host(&got_amax), damax.ptr, 4), "download amax");
  check(tecore_memcpy(host(&scale_inv), dsinv.ptr, 4), "download scale_inv");
  if (scale_inv != 2.f)
    throw std::runtime_error("scale_inv " + std::to_string(scale_inv) + ", expected 2");
  if (got_amax != amax)
    throw std::runtime_error("amax " + std::to_string(got_amax) + ", expected " +
                             std::to_string(amax));
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) {
    float tol = std::fmax(std::fabs(x[i]) * 0.125f, scale_inv * 7.62939453125e-6f);
    if (!(std::fabs(y[i] - x[i]) <= tol) && bad++ < 5)
      std::fprintf(stderr, "consumer.cpp: element %zu: %.9g -> %.9g, tolerance %.3g\n", i, x[i],
                   y[i], tol);
  }
  if (bad)
    throw std::runtime_error(std::to_string(bad) + " elements out of tolerance");
  std::printf("consumer.cpp: libte %s through CMake, %zu elements quantized to E5M2 and back\n",
              tecore_version_string(), n);
  return 0;
}

} // namespace

int main() {
  try {
    return run();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "consumer.cpp: %s\n", e.what());
    return 1;
  }
}
