// Host codec of the fp8 cache with per-block scales (issue 5 item 2), for the reference
// and the tests. One token is 656 bytes:
//   bytes   0..511  the 512 latent values in e4m3, value d = e4m3[d] x scale[d / 128]
//   bytes 512..527  4 fp32 scales (little endian), one per 128 latent values
//   bytes 528..655  the 64 rope values in bf16
// Encoding: scale = max |x| / 448 over the group (1 for an all-zero group), e4m3 = x /
// scale rounded to nearest even and saturated (fp8.hpp); rope rounded to bf16.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "reference/bf16.hpp"
#include "reference/fp8.hpp"

namespace kbmla::ref {

constexpr int kFp8BlockLatent = 512;
constexpr int kFp8BlockGroupSize = 128;
constexpr int kFp8BlockGroups = kFp8BlockLatent / kFp8BlockGroupSize;  // 4
constexpr int kFp8BlockRope = 64;
constexpr int kFp8BlockScalesOffset = kFp8BlockLatent;                                 // 512
constexpr int kFp8BlockRopeOffset = kFp8BlockScalesOffset + 4 * kFp8BlockGroups;      // 528
constexpr int kFp8BlockTokenBytes = kFp8BlockRopeOffset + 2 * kFp8BlockRope;          // 656
static_assert(kFp8BlockTokenBytes == 656, "the per-block fp8 token is 656 bytes");

// Encodes one token: latent[512] and rope[64] into out[656]. power_of_two_scales: each
// scale rounded up to a power of two (e4m3 x scale is then exact in bf16: the GPU tests'
// reference runs on a bf16 cache). A group holding a NaN gets a NaN scale.
inline void encode_fp8_block_token(const float* latent, const float* rope, uint8_t* out,
                                   bool power_of_two_scales = false) {
  for (int g = 0; g < kFp8BlockGroups; ++g) {
    float amax = 0.f;
    bool nan = false;
    for (int i = 0; i < kFp8BlockGroupSize; ++i) {
      const float x = latent[g * kFp8BlockGroupSize + i];
      nan |= std::isnan(x);
      amax = std::fmax(amax, std::fabs(x));
    }
    float scale = amax > 0.f ? amax / 448.f : 1.f;
    if (power_of_two_scales) scale = std::ldexp(1.f, int(std::ceil(std::log2(scale))));
    if (nan) scale = std::nanf("");
    for (int i = 0; i < kFp8BlockGroupSize; ++i) {
      const int d = g * kFp8BlockGroupSize + i;
      out[d] = float_to_e4m3(nan ? latent[d] : latent[d] / scale);
    }
    std::memcpy(out + kFp8BlockScalesOffset + 4 * g, &scale, 4);
  }
  for (int j = 0; j < kFp8BlockRope; ++j) {
    const Bf16 b = float_to_bf16(rope[j]);
    std::memcpy(out + kFp8BlockRopeOffset + 2 * j, &b.bits, 2);
  }
}

// The 576 values one token holds (latent then rope), as the reference reads them.
inline void decode_fp8_block_token(const uint8_t* in, float* out) {
  for (int g = 0; g < kFp8BlockGroups; ++g) {
    float scale;
    std::memcpy(&scale, in + kFp8BlockScalesOffset + 4 * g, 4);
    for (int i = 0; i < kFp8BlockGroupSize; ++i) {
      const int d = g * kFp8BlockGroupSize + i;
      out[d] = e4m3_to_float(in[d]) * scale;
    }
  }
  for (int j = 0; j < kFp8BlockRope; ++j) {
    Bf16 b;
    std::memcpy(&b.bits, in + kFp8BlockRopeOffset + 2 * j, 2);
    out[kFp8BlockLatent + j] = bf16_to_float(b);
  }
}

}  // namespace kbmla::ref
