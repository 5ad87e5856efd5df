#include "kbmla/helpers.hpp"

#include <algorithm>

#include "kbmla/error.hpp"

namespace kbmla {

QTileLayout compute_q_tile_layout(int heads, int q_len, int m_tile) {
  require(heads > 0 && q_len > 0 && m_tile > 0, "compute_q_tile_layout: heads (", heads, "), q_len (",
          q_len, ") and m_tile (", m_tile, ") must all be positive");
  require(heads <= m_tile, "compute_q_tile_layout: heads (", heads, ") must fit one MMA tile: allowed 1..",
          m_tile, " for m_tile ", m_tile);
  return q_tile_layout_unchecked(heads, q_len, m_tile);
}

int fold_q_len_factor(int heads, int q_len, int m_tile) {
  if (heads <= 0 || q_len <= 0 || m_tile <= 0) return 1;
  int max_fold = std::min(q_len, m_tile / heads);
  for (int candidate = max_fold; candidate > 1; --candidate) {
    if (q_len % candidate == 0) return candidate;
  }
  return 1;
}

std::string decode_arch_name(ComputeCapability cc) {
  const bool supported = cc == ComputeCapability{9, 0} || cc == ComputeCapability{10, 0} ||
                         cc == ComputeCapability{10, 3} || cc == ComputeCapability{10, 7};
  require(supported, "MLA decode requires SM90, SM100, SM103 or SM107 (compute capability 9.0, 10.0, 10.3 "
          "or 10.7), got ", cc.major, ".", cc.minor);
  return "sm_" + std::to_string(cc.major) + std::to_string(cc.minor);
}

DecodeTilers select_decode_tilers(int heads, int q_len, bool is_fp8, ComputeCapability cc) {
  decode_arch_name(cc);
  require(heads > 0 && q_len > 0, "select_decode_tilers: heads (", heads, ") and q_len (", q_len,
          ") must be positive");
  if (cc.major == 9) return {{64, 64}, {64, 256}};
  const DecodeTilers sm100_default{{128, 128}, {128, 256}};
  if (!is_fp8) return sm100_default;
  const bool is_sm100 = cc == ComputeCapability{10, 0};
  if (heads * q_len <= 64 && is_sm100) return {{64, 128}, {64, 256}};
  return sm100_default;
}

int sm90_cluster_size(int heads, int q_len) {
  require(heads > 0 && heads <= 128, "heads (", heads, ") must be in 1..128");
  require(q_len > 0, "q_len (", q_len, ") must be positive");
  return heads * q_len > kSm90RowsPerCta ? 2 : 1;
}

}  // namespace kbmla
