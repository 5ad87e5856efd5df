// 2^x on the FMA and integer pipes instead of the special-function unit (SFU), for the
// softmax of consumers whose stretch from S to P is SFU-bound (consumer.cuh). Host and
// device share this definition so that the CPU tests check the arithmetic the kernel runs.
//
// Why: the SFU takes 8 cycles per warp instruction on an SM sub-partition, so 32
// exponentials a thread leave most issue slots empty; one here costs 8 issued
// instructions and no SFU slot. How: x is clamped to -127 and split as j + f with
// j = round(x) (adding 1.5 * 2^23 leaves j in the low mantissa bits) and |f| <= 1/2; 2^f is
// a cubic with constant term 1 (max relative error 1.04e-4, far below bf16's 2^-9
// rounding of P); 2^j is added to the exponent field. x <= -127 (masked keys: -inf) and NaN
// give exactly +0 (1.0's exponent 127 minus 127); x in (-127, -126) gives a denormal
// (the bf16 P and the fp32 sums treat it as nearly zero); valid for x <= 127.
#pragma once

#include <cstdint>
#if !defined(__CUDA_ARCH__)
#include <bit>
#include <cmath>
#endif

#include "kbmla/hd.hpp"

namespace kbmla::sm90 {

KBMLA_HD float fma_exp2(float x) {
  constexpr float kRoundMagic = 12582912.f;  // 1.5 * 2^23
#if defined(__CUDA_ARCH__)
  x = fmaxf(x, -127.f);
  const float t = __fadd_rn(x, kRoundMagic);
  const float f = __fsub_rn(x, __fsub_rn(t, kRoundMagic));
  const float p = fmaf(fmaf(fmaf(0.05500891f, f, 0.242211f), f, 0.69328293f), f, 1.f);
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(t) << 23));  // unsigned: wraps, as meant
#else
  x = std::fmax(x, -127.f);  // fmax, like fmaxf on the device, returns -127 for NaN
  const float t = x + kRoundMagic;
  const float f = x - (t - kRoundMagic);
  const float p = std::fma(std::fma(std::fma(0.05500891f, f, 0.242211f), f, 0.69328293f), f, 1.f);
  const uint32_t bits = std::bit_cast<uint32_t>(p) + (std::bit_cast<uint32_t>(t) << 23);
  return std::bit_cast<float>(bits);
#endif
}

}  // namespace kbmla::sm90
