// The FMA-pipe exponential of the bf16 64-row consumers (src/sm90/decode/fma_exp2.hpp):
// the kernel's arithmetic, checked on the host against std::exp2 in double.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "src/sm90/decode/fma_exp2.hpp"

namespace {

using kbmla::sm90::fma_exp2;

double relative_error(float x) { return std::abs(double(fma_exp2(x)) / std::exp2(double(x)) - 1.0); }

// Everything a softmax argument can be: the lazy rescale keeps x <= 8 (kRescaleSlack), the
// normal range goes down to -126. Worst relative error 1.04e-4 (the cubic's), whatever
// rounding j takes at the half-integers.
TEST(FmaExp2, RelativeErrorBelowTheCubicsBound) {
  double worst = 0.0;
  for (int k = -126 * 1024; k <= 8 * 1024; ++k) worst = std::max(worst, relative_error(k / 1024.0f));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> any(-126.f, 8.f);
  for (int i = 0; i < 200000; ++i) worst = std::max(worst, relative_error(any(rng)));
  for (float half = -125.5f; half < 8.f; half += 1.f) {
    worst = std::max(worst, relative_error(half));
    worst = std::max(worst, relative_error(std::nextafter(half, -1000.f)));
    worst = std::max(worst, relative_error(std::nextafter(half, 1000.f)));
  }
  EXPECT_LT(worst, 1.05e-4);
  EXPECT_GT(worst, 5e-5) << "the cubic's error should show: is the FMA path still the one tested?";
}

TEST(FmaExp2, IntegersAreExact) {
  for (int k = -126; k <= 127; ++k) EXPECT_EQ(fma_exp2(float(k)), std::ldexp(1.0f, k)) << k;
}

// Masked keys (-inf), anything at or below -127 and NaN give +0, as P must be for keys a
// row cannot see; between -127 and -126 a tiny non-negative value, never a wrapped exponent.
TEST(FmaExp2, MaskedAndTinyArgumentsGiveZeroOrTiny) {
  const float inf = std::numeric_limits<float>::infinity();
  for (float x : {-inf, -1e30f, -1000.f, -127.5f, -127.f, std::numeric_limits<float>::quiet_NaN()}) {
    const float y = fma_exp2(x);
    EXPECT_EQ(y, 0.f) << x;
    EXPECT_FALSE(std::signbit(y)) << x;
  }
  for (float x = -126.999f; x < -126.f; x += 0.01f) {
    const float y = fma_exp2(x);
    EXPECT_GE(y, 0.f) << x;
    EXPECT_LT(y, std::ldexp(1.0f, -125)) << x;
  }
}

}  // namespace
