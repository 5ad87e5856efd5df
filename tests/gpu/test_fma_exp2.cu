// fma_exp2's device branch (the one the bf16 64-row consumers run) against its host branch,
// which tests/cpu/test_fma_exp2.cpp checks against std::exp2: the two are written with
// different intrinsics (__fadd_rn / __float_as_uint against std::bit_cast), so only
// bit-for-bit equality on the GPU shows the kernel computes what the CPU tests verified.
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "src/sm90/decode/fma_exp2.hpp"
#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

__global__ void fma_exp2_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = sm90::fma_exp2(x[i]);
}

TEST(GpuFmaExp2, DeviceMatchesTheHostBitForBit) {
  KBMLA_REQUIRE_SM90();
  std::vector<float> x;
  for (int k = -128 * 256; k <= 128 * 256; ++k) x.push_back(k / 256.0f);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> any(-130.f, 127.f);
  for (int i = 0; i < 1 << 18; ++i) x.push_back(any(rng));
  for (float half = -126.5f; half < 127.f; half += 1.f) {
    x.push_back(std::nextafter(half, -1000.f));
    x.push_back(std::nextafter(half, 1000.f));
  }
  const float inf = std::numeric_limits<float>::infinity();
  for (float v : {-inf, -1e30f, std::numeric_limits<float>::quiet_NaN(), -0.f}) x.push_back(v);

  const int n = int(x.size());
  DeviceArray<float> dx(x), dy(x.size());
  dy.poison();
  fma_exp2_kernel<<<(n + 255) / 256, 256>>>(dx.ptr, dy.ptr, n);
  cuda_ok(cudaGetLastError(), "fma_exp2_kernel launch");
  const std::vector<float> y = dy.download();
  int mismatches = 0;
  for (int i = 0; i < n; ++i) {
    const float h = sm90::fma_exp2(x[i]);
    if (std::memcmp(&h, &y[i], sizeof(float)) != 0 && ++mismatches <= 5) {
      ADD_FAILURE() << "x = " << x[i] << ": device " << y[i] << ", host " << h;
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << n << " arguments";
}

}  // namespace
}  // namespace kbmla::test
