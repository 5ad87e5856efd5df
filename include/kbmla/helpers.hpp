// The seed's helper functions (vllm kimi_k3 kv_balanced_mla/helpers.py), ported with the
// same semantics, plus the sm_90 extension. Host functions validate and throw
// kbmla::Error; the KBMLA_HD variants are the unchecked cores that kernels use after
// the host has validated.
#pragma once

#include <string>

#include "kbmla/hd.hpp"

namespace kbmla {

// Rows of the MMA are `query_token * heads + head` and cross query-token boundaries
// (FlashInfer PR #4178): 16 heads x 4 tokens fill one 64-row tile; only the final tile
// of a request is padded.
struct QTileLayout {
  int total_rows;      // heads * q_len
  int num_tiles;       // ceil(total_rows / m_tile)
  int last_tile_rows;  // rows of the final tile, in [1, m_tile]
};

// Unchecked core: heads, q_len, m_tile > 0 and heads <= m_tile.
KBMLA_HD QTileLayout q_tile_layout_unchecked(int heads, int q_len, int m_tile) {
  int total = heads * q_len;
  int tiles = (total + m_tile - 1) / m_tile;
  return {total, tiles, total - (tiles - 1) * m_tile};
}

// Seed: compute_q_tile_layout. Throws unless heads, q_len, m_tile > 0 and heads <= m_tile.
QTileLayout compute_q_tile_layout(int heads, int q_len, int m_tile);

// Seed: get_mla_decode_fold_sq_factor. Largest divisor of q_len that is <= m_tile / heads
// (and <= q_len); 1 when there is none. Like the seed, non-positive input returns 1
// instead of throwing.
int fold_q_len_factor(int heads, int q_len, int m_tile = 128);

struct ComputeCapability {
  int major;
  int minor;
  bool operator==(const ComputeCapability&) const = default;
};

// Seed: get_mla_decode_arch, extended with sm_90 (Hopper). Returns "sm_90", "sm_100",
// "sm_103" or "sm_107"; anything else throws naming the capability and the accepted set.
std::string decode_arch_name(ComputeCapability cc);

struct MmaTiler {
  int m;  // MMA rows (query rows, or KV tokens when A and B are swapped)
  int n;  // MMA columns
  bool operator==(const MmaTiler&) const = default;
};

struct DecodeTilers {
  MmaTiler qk;  // S = Q K^T tile: (rows, KV tokens)
  MmaTiler pv;  // O = P V tile: (rows, d_v columns)
  bool operator==(const DecodeTilers&) const = default;
};

// Seed: select_mla_decode_tilers. SM100 rules unchanged: (128,128)/(128,256), and for
// fp8 with heads * q_len <= 64 on sm_100 exactly, (64,128)/(64,256).
// SM90 (our extension): (64,64)/(64,256) for every dtype. Why:
//  - wgmma's M is fixed at 64 per warpgroup, so a consumer warpgroup owns 64 query rows;
//    more rows go to a second CTA of a 2-CTA cluster, never to a second M tile in one
//    CTA, because the O accumulator already takes 128 registers per thread per 256 d_v
//    columns (64 x 256 fp32 over 128 threads).
//  - QK uses N = 64 KV tokens: one KV stage of 64 bf16 tokens is 72 KiB of shared
//    memory (64 x 576 x 2 B), and with Q at 72 KiB only two such stages fit in 227 KiB;
//    a larger N would leave a single stage and no overlap of load and math.
//  - PV uses N = 256: d_v = 512 split over the two consumer warpgroups, 256 each.
// Checks the capability (throws on unsupported), and heads, q_len > 0.
DecodeTilers select_decode_tilers(int heads, int q_len, bool is_fp8, ComputeCapability cc);

// SM90: a q tile is 64 rows per CTA times the cluster size. Rows above 64 use a 2-CTA
// cluster (128 rows) so 65..128 query rows read each KV tile once.
constexpr int kSm90RowsPerCta = 64;
int sm90_cluster_size(int heads, int q_len);

}  // namespace kbmla
