// Host e4m3 (OCP FP8: 1 sign, 4 exponent bits with bias 7, 3 mantissa bits, no infinities,
// S.1111.111 is NaN, largest finite 448) for the reference and the tests. Encoding rounds to
// nearest even and saturates to +-448, as the device's cvt.rn.satfinite.e4m3x2.f32 does.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace kbmla::ref {

inline float e4m3_to_float(uint8_t b) {
  const int exp = (b >> 3) & 15, mant = b & 7;
  if (exp == 15 && mant == 7) return std::numeric_limits<float>::quiet_NaN();
  const float mag = exp == 0 ? std::ldexp(float(mant), -9) : std::ldexp(float(8 + mant), exp - 10);
  return (b & 0x80) ? -mag : mag;
}

inline uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0;
  const float a = std::fabs(f);
  if (a >= 448.f) return sign | 0x7e;
  if (a == 0.f) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1)
  int exp = e - 1 + 7;
  if (exp <= 0) {  // subnormal: steps of 2^-9 (8 steps reach the smallest normal, 0x08)
    return sign | uint8_t(std::nearbyint(std::ldexp(a, 9)));
  }
  int q = int(std::nearbyint(std::ldexp(a, 3 - (e - 1))));  // 8..16 (16: the next binade)
  if (q == 16) {
    q = 8;
    ++exp;
  }
  if (exp > 15 || (exp == 15 && q == 15)) return sign | 0x7e;
  return sign | uint8_t(exp << 3) | uint8_t(q - 8);
}

}  // namespace kbmla::ref
