// Host bf16 storage type for the reference and the tests (round to nearest even).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kbmla::ref {

struct Bf16 {
  uint16_t bits;
};

inline float bf16_to_float(Bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline Bf16 float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return {static_cast<uint16_t>((u >> 16) | 0x40)};  // keep it a quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {static_cast<uint16_t>(u >> 16)};
}

inline double to_double(Bf16 v) { return bf16_to_float(v); }
inline double to_double(float v) { return v; }

}  // namespace kbmla::ref
