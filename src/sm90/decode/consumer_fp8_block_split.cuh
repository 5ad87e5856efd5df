// The per-block-scale fp8 kernel for tiles of 17..64 rows with split consumer roles, as the
// per-tensor one (consumer_fp8_split.cuh): one softmax warpgroup computes S (the group fold
// of consumer_fp8_block.cuh), the online softmax and the block's P in f16 over the stage's
// bf16 rope box (S has read it; it lives as long as the stage); two P V warpgroups each
// make the e4m3 P tiles of their two groups from it (P x scale_g[token] / M_g, the
// alternating kernel's write_p_tiles, split between them), add the groups of their 256
// dims and write the output. The tiles were the softmax warpgroup's, 17 % of its samples on
// the critical path (ncu, lognormal_H16_Sq4), while the P V warpgroups waited for P about
// half of theirs. Each P V warpgroup's two tiles have one 8 KiB buffer (the alternating
// kernel's own-P buffers): it rewrites them only after its last block's wgmma completed.
// The row factors and rescale flag of a block are per stage (the hand-over slots' row
// maxima are unused here, and the per-stage factors fit in their place).
// Registers (512 threads): producer 40 (loader, Q loader, scale helper; as the alternating
// kernel's), softmax 120 (S and one group's product, 64, while it folds), P V 176 (O^T 128
// and the V^T fragments of one k-step, 16, or the P pairs and tile words, 28; a few
// loop-invariant spills there, and P V at 184 with softmax 104, no spills, measured level).
#pragma once

#include "src/sm90/decode/consumer_fp8_block.cuh"
#include "src/sm90/decode/consumer_fp8_split.cuh"

namespace kbmla::sm90::fp8_block {

constexpr int kBlockSplitProducerRegs = 40;
constexpr int kBlockSplitSoftmaxRegs = 120;
constexpr int kBlockSplitPvRegs = 176;
static_assert(kBlockSplitProducerRegs + kBlockSplitSoftmaxRegs + 2 * kBlockSplitPvRegs == 65536 / 128,
              "register pool of 512 threads");

// kBarBlockSplitPvTiles + pv (named_barriers.hpp): the P V warpgroups' tiles.

// Probe builds only (bench/build_variant.sh NAME -DKBMLA_BLOCK_SPLIT_SPIKE=N
// kernel_fp8_block_split.cu; wrong outputs, timing only): bit 1, the P V warpgroups skip
// their P tiles; bit 2, S has group 0's product only; bit 4, P V skips its V^T loads and
// wgmma. Which role's work sets the pace (bench/NOTES.md v39: each shortens the call, so
// no single role does). 0, the shipped kernel (its SASS unchanged).
#ifndef KBMLA_BLOCK_SPLIT_SPIKE
#define KBMLA_BLOCK_SPLIT_SPIKE 0
#endif
constexpr int kBlockSplitSpike = KBMLA_BLOCK_SPLIT_SPIKE;

struct BlockSplitLayout : SmemLayoutT<false> {
  using Base = SmemLayoutT<false>;
  // Per-stage row factors over the hand-over slots' row_scale and row_max (both unused).
  static_assert(Base::row_scale + 4 * Base::kStages * kRowsPerCta <= Base::group_factors, "per-stage row factors");
  static_assert(Base::kStages * 4 <= Base::row_scale - Base::rescale_flags, "per-stage rescale flags");
  // The P tiles of P V warpgroup pv: [2 groups][kPBytes] at own_p + pv x kPvTileBytes.
  static constexpr uint32_t kPvTileBytes = 2 * Base::kPBytes;
  // The block's P in f16 over the stage's rope box: [64 rows][128 bytes].
  static_assert(kRowsPerCta * kBlockTokens * 2 <= (kQkBoxes - kRopeBox) * fp8::kBoxBytes, "f16 P fits the rope box");
  static constexpr uint32_t split_barriers = (Base::end + 7) / 8 * 8;
  static constexpr uint32_t split_end = split_barriers + fp8::SplitBarriers<Base::kStages>::kBytes;
  static constexpr uint32_t alloc = split_end + 1024;
};
static_assert(BlockSplitLayout::alloc <= 232448, "over the sm_90 shared-memory limit per CTA");

// The block's P (fp32, the S fragment layout) in f16 at p16: [64 rows][128 bytes], row r's
// 16-byte chunk k at 16 (k ^ (r % 8)) (conflict-free for these stores and for
// scale_p_tiles' loads). The lane's pairs of row r, tokens 8i + 2c + {0, 1} (c = lane % 4),
// fill chunks 2c (i = 0..3) and 2c + 1 (i = 4..7).
__device__ __forceinline__ void store_p_f16(const float (&p)[32], uint8_t* p16, int r0, int r1, int lane) {
  const int c = lane % 4;
  auto h2 = [](float a, float b) {
    const __half2 h = __floats2half2_rn(a, b);
    return *reinterpret_cast<const uint32_t*>(&h);
  };
#pragma unroll
  for (int q = 0; q < 2; ++q) {
    const int i = 4 * q;
    *reinterpret_cast<uint4*>(p16 + r0 * 128 + 16 * ((2 * c + q) ^ (r0 % 8))) =
        make_uint4(h2(p[4 * i + 0], p[4 * i + 1]), h2(p[4 * i + 4], p[4 * i + 5]), h2(p[4 * i + 8], p[4 * i + 9]),
                   h2(p[4 * i + 12], p[4 * i + 13]));
    *reinterpret_cast<uint4*>(p16 + r1 * 128 + 16 * ((2 * c + q) ^ (r1 % 8))) =
        make_uint4(h2(p[4 * i + 2], p[4 * i + 3]), h2(p[4 * i + 6], p[4 * i + 7]), h2(p[4 * i + 10], p[4 * i + 11]),
                   h2(p[4 * i + 14], p[4 * i + 15]));
  }
}

// P V warpgroup pv's two e4m3 P tiles (groups 2 pv, 2 pv + 1) at tiles from the block's f16
// P: tile g holds P x scale_g[token] / M_g (the helper's half2 factor pairs) in the byte
// order of write_p_tiles (consumer_fp8_block.cuh): in row r's 16-byte chunk gi, word c holds
// tokens 16 gi + 2c + {0, 1} (low half) and 16 gi + 8 + 2c + {0, 1} (high half). Thread t
// makes row t % 64, tokens 32 h.. (h = t / 64): the f16 pairs i = 4h + m (m = 0..3) of
// every c, four 16-byte loads; factor pair 4i + c.
__device__ __forceinline__ void scale_p_tiles(int pv, const uint8_t* p16, const __half2* ratios, uint8_t* tiles,
                                              int tid) {
  const int r = tid % 64, h = tid / 64;
  uint4 x[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) x[c] = *reinterpret_cast<const uint4*>(p16 + r * 128 + 16 * ((2 * c + h) ^ (r % 8)));
  auto word = [](const uint4& v, int m) { return m == 0 ? v.x : m == 1 ? v.y : m == 2 ? v.z : v.w; };
  auto as_h2 = [](uint32_t u) { return *reinterpret_cast<const __half2*>(&u); };
#pragma unroll
  for (int gg = 0; gg < 2; ++gg) {
    const __half2* rg = ratios + (2 * pv + gg) * 32 + 16 * h;
    uint32_t w[2][4] = {};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
      const uint4 rm = *reinterpret_cast<const uint4*>(rg + 4 * m);  // c = 0..3
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const __half2 y = __hmul2(as_h2(word(x[c], m)), as_h2(word(rm, c)));
        const uint32_t e = __nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(y), __NV_SATFINITE, __NV_E4M3);
        w[m >> 1][c] |= e << (16 * (m & 1));
      }
    }
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      *reinterpret_cast<uint4*>(tiles + gg * SmemLayoutT<false>::kPBytes + swizzled64(r, 16 * (2 * h + q))) =
          make_uint4(w[q][0], w[q][1], w[q][2], w[q][3]);
    }
  }
}

// The softmax warpgroup (threads 128..255).
__device__ __forceinline__ void run_block_split_softmax(const DecodeParams& p, uint8_t* smem) {
  using L = BlockSplitLayout;
  constexpr int kStages = L::kStages;
  const int tid = threadIdx.x - 128, warp = tid / 32, lane = tid % 32;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::barriers);
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  uint64_t* full = bars + 2;
  uint64_t* ready = bars + 2 + 2 * kStages;
  const auto [p_full, stats_full, stats_empty] = fp8::SplitBarriers<kStages>(smem + L::split_barriers);
  float* row_scale = reinterpret_cast<float*>(smem + L::row_scale);  // [stage][64]
  volatile uint32_t* rescale_flags = reinterpret_cast<uint32_t*>(smem + L::rescale_flags);
  float2* row_stats = reinterpret_cast<float2*>(smem + L::row_stats);  // [parity][2][64]
  const uint32_t q_addr = smem_addr(smem + L::q);
  const uint32_t kv_addr = smem_addr(smem + L::kv);
  BlockWideRows rows(warp, lane);
  int item_count = 0, block_count = 0;
  if (p.timeline != nullptr && tid == 0) record_timeline_start(p);
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item(p, w);
    if (!it.run) continue;
    rows.begin_item(p, it, fp8::global_q_scales(p, it));
    Mbarrier::wait(q_full, item_count & 1);
    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kStages;
      const uint32_t phase = (block_count / kStages) & 1;
      Mbarrier::wait(ready + stage, phase);  // the helper's transposed scales and P ratios
      Mbarrier::wait(full + stage, phase);
      const uint32_t stage_addr = kv_addr + stage * kStageBytes;
      const float* scales =
          reinterpret_cast<const float*>(smem + L::kv + stage * kStageBytes + kQkBoxes * fp8::kBoxBytes);
      // S (waited for: Q and K read), masked, and its raw row maxima.
      compute_s<true, (kBlockSplitSpike & 2) ? 1 : kGroups>(q_addr, stage_addr, scales, rows.col_pair, rows.inv_qs0,
                                                            rows.inv_qs1, rows.s);
      mask_invisible_keys(rows.s, blk, rows.col_pair, rows.vis0, rows.vis1, rows.mask_from);
      block_row_max(rows.s, rows.mx0, rows.mx1);
      if (blk + 1 == it.blk_end) Mbarrier::arrive(q_empty);
      fp8::publish_block_factors(rows, row_scale, rescale_flags, stage, tid);
      rows.exponentials();
      store_p_f16(rows.s, smem + L::kv + stage * kStageBytes + kRopeBox * fp8::kBoxBytes, rows.r0, rows.r1, lane);
      // The rope box is rewritten by TMA once the stage is released (async proxy).
      fence_view_async_shared();
      Mbarrier::arrive(p_full + stage);
    }
    if (it.blk_end == it.blk_begin) Mbarrier::arrive(q_empty);  // (no block: Q unread)
    const int par = item_count & 1;
    Mbarrier::wait(stats_empty + par, ((item_count >> 1) & 1) ^ 1);
    fp8::publish_split_stats(rows, row_stats + par * 2 * kRowsPerCta, warp, lane);
    Mbarrier::arrive(stats_full + par);
    ++item_count;
  }
}

// A P V warpgroup (pv 0: threads 256..383, groups 0, 1; pv 1: 384..511, groups 2, 3).
// kAcc: N / 2 accumulators per M block, N = 64, or 48 / 32 for tiles of at most that many
// rows (fp8::run_split_pv).
template <int kAcc = 32>
__device__ __forceinline__ void run_block_split_pv(const DecodeParams& p, uint8_t* smem, int pv) {
  using L = BlockSplitLayout;
  constexpr int kStages = L::kStages;
  const int tid = threadIdx.x - 128 * (pv + 2), warp = tid / 32, lane = tid % 32;
  const int col_pair = 2 * (lane % 4);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::barriers);
  uint64_t* empty = bars + 2 + kStages;
  const auto [p_full, stats_full, stats_empty] = fp8::SplitBarriers<kStages>(smem + L::split_barriers);
  const volatile int32_t* stage_flags = reinterpret_cast<int32_t*>(smem + L::stage_flags);
  const volatile uint32_t* rescale_flags = reinterpret_cast<uint32_t*>(smem + L::rescale_flags);
  const float* row_scale = reinterpret_cast<float*>(smem + L::row_scale);
  const float2* row_stats = reinterpret_cast<float2*>(smem + L::row_stats);
  const float4* factors = reinterpret_cast<const float4*>(smem + L::group_factors);
  const uint32_t kv_addr = smem_addr(smem + L::kv);
  uint8_t* tiles = smem + L::own_p + pv * L::kPvTileBytes;
  const uint64_t p_desc = desc_k_major_sw64(smem_addr(tiles));
  const uint32_t zero_addr = smem_addr(smem + L::zero_row);
  int item_count = 0, block_count = 0;
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item(p, w);
    if (!it.run) continue;
    float o[4][kAcc];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) o[b][i] = 0.f;
    }
    float2 group_max = make_float2(1.f, 1.f);
    bool bad = false;
    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kStages;
      Mbarrier::wait(p_full + stage, (block_count / kStages) & 1);
      bad |= stage_flags[stage] != 0;
      const uint32_t stage_addr = kv_addr + stage * kStageBytes;
      if (rescale_flags[stage] != 0) fp8::rescale_ot(o, row_scale + stage * 64, col_pair);
      // O of the groups in units of M_g: rescaled when M_g grew; the last block's M_g ends it.
      rescale_groups(pv, o, factors, stage);
      if (blk + 1 == it.blk_end) group_max = own_groups(pv, factors[3 * stage]);
      // This warpgroup's tiles: its wgmma of the previous block completed (waited for).
      if constexpr ((kBlockSplitSpike & 1) == 0) {
        scale_p_tiles(pv, smem + L::kv + stage * kStageBytes + kRopeBox * fp8::kBoxBytes,
                      reinterpret_cast<const __half2*>(smem + L::p_ratios) + stage * kGroups * 32, tiles, tid);
      }
      fence_view_async_shared();  // for the wgmma (async proxy)
      named_sync(kBarBlockSplitPvTiles + pv, 128);
      // M blocks 0, 1: group 2 pv's P tile; 2, 3: group 2 pv + 1's, L::kPBytes on.
      if constexpr ((kBlockSplitSpike & 4) == 0) {
        fp8::pv_block<L::kPBytes>(pv, stage_addr, zero_addr, warp, lane, it.seqlen - blk * kBlockTokens, p_desc, o);
      }
      release_stage(empty + stage, lane, p.cluster_size);
    }
    const int par = item_count & 1;
    Mbarrier::wait(stats_full + par, (item_count >> 1) & 1);
    scale_groups(o, group_max);  // O of group g was in units of M_g
    write_item_output_transposed(p, it, pv, warp, lane, row_stats + par * 2 * kRowsPerCta, 1.f, bad, o);
    Mbarrier::arrive(stats_empty + par);
    publish_partials(p, it, pv * 128 + tid);
    ++item_count;
  }
  if (pv == 0 && p.timeline != nullptr && tid == 0) record_timeline_end(p, item_count);
}

}  // namespace kbmla::sm90::fp8_block
