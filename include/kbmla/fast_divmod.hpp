// Division by a run-time constant through a multiply-high and a shift (Granlund and
// Montgomery, "Division by invariant integers using multiplication", 1994): the
// schedulers divide the linear work index by B, S and the split count once per work
// tile, and an integer divide is ~20 SASS instructions on sm_90.
#pragma once

#include <cstdint>

#include "kbmla/hd.hpp"

namespace kbmla {

class FastDivmod {
 public:
  FastDivmod() = default;

  // divisor >= 1. Exact for every dividend in [0, 2^31).
  KBMLA_HD explicit FastDivmod(int32_t divisor) : divisor_(divisor) {
    uint32_t d = static_cast<uint32_t>(divisor);
    const uint32_t log2_ceil = ceil_log2(d);
    shift_ = log2_ceil;
    // m = floor(2^32 * (2^l - d) / d) + 1 fits in 32 bits because 2^l - d < d.
    multiplier_ = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << log2_ceil) - d)) / d + 1);
  }

  KBMLA_HD int32_t divisor() const { return divisor_; }

  KBMLA_HD int32_t div(int32_t n) const {
    uint32_t un = static_cast<uint32_t>(n);
    // (mulhi + n) stays below 2^32 because mulhi <= n < 2^31.
    return static_cast<int32_t>((mulhi(un, multiplier_) + un) >> shift_);
  }

  // Returns the quotient, stores the remainder.
  KBMLA_HD int32_t divmod(int32_t n, int32_t& remainder) const {
    int32_t q = div(n);
    remainder = n - q * divisor_;
    return q;
  }

 private:
  // The least l with 2^l >= d, by a count of leading zeros (the device planner sets up one
  // divisor per request).
  KBMLA_HD static uint32_t ceil_log2(uint32_t d) {
    if (d <= 1) return 0;
#if defined(__CUDA_ARCH__)
    return 32 - static_cast<uint32_t>(__clz(static_cast<int>(d - 1)));
#else
    return 32 - static_cast<uint32_t>(__builtin_clz(d - 1));
#endif
  }

  KBMLA_HD static uint32_t mulhi(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __umulhi(a, b);
#else
    return static_cast<uint32_t>((static_cast<uint64_t>(a) * b) >> 32);
#endif
  }

  int32_t divisor_ = 1;
  uint32_t multiplier_ = 1;
  uint32_t shift_ = 0;
};

}  // namespace kbmla
