// The per-block-scale fp8 kernel for tiles of 17..64 rows with split consumer roles, as the
// per-tensor one (consumer_fp8_split.cuh): one softmax warpgroup computes S (the group fold
// of consumer_fp8_block.cuh), the online softmax and the block's P, one e4m3 tile (the
// per-tensor kernel's token order) over the stage's bf16 rope box (S has read it; it lives
// as long as the stage); two P V warpgroups each add O^T_g += (V^T_g x scale_g[token] / M_g)
// P^T for their two groups (256 dims), the group factors applied to the V^T fragments in
// registers (e4m3 -> f16, times the helper's half2 ratio pairs, -> e4m3), and write the
// output.
// Why V and not P (bench/NOTES.md v51): P x scale_g / M_g needs a P tile per group, which
// the P V warpgroups made from an f16 P in shared memory (the f16 round trip, four tile
// stores and a named barrier a block); with the factors on V the block's shared-memory
// traffic is an estimated ~250 wavefronts less (of ~2,050, ncu: the per-block kernels ran
// the L1 at 65-70 % of its peak, the per-tensor ones 53-59 %), for ~190 conversion
// instructions a P V thread (counted in the code). Measured -1..-4 % on the 64-row per-block
// cases. Accuracy: V is rounded twice (its e4m3 value times the factor, back to e4m3); the
// GPU tests' arbitrary-scale caches measured up to 3.0 % relative error (was 2.8 %), worst
// row 3.8 % (3.5 %).
// The row factors and rescale flag of a block are per stage (the hand-over slots' row
// maxima are unused here, and the per-stage factors fit in their place). The layout's
// own-P buffers (the alternating kernel's) hold only the item's Q row scales when the P V
// warpgroups quantise Q (p.q_inline, one-item plans; bench/NOTES.md v52).
// Registers (512 threads): producer 40 (loader, Q loader, scale helper; as the alternating
// kernel's), softmax 120 (S and one group's product, 64, while it folds), P V 176 (O^T 128,
// the V^T fragments of one k-step, 16, and their factor pairs, 8; no spills in the block
// loop: the P tiles' version reloaded six spilled loop invariants a block there).
#pragma once

#include "src/sm90/decode/consumer_fp8_block.cuh"
#include "src/sm90/decode/consumer_fp8_split.cuh"
#include "src/sm90/decode/q_inline_fp8.cuh"

namespace kbmla::sm90::fp8_block {

constexpr int kBlockSplitProducerRegs = 40;
constexpr int kBlockSplitSoftmaxRegs = 120;
constexpr int kBlockSplitPvRegs = 176;
static_assert(kBlockSplitProducerRegs + kBlockSplitSoftmaxRegs + 2 * kBlockSplitPvRegs == 65536 / 128,
              "register pool of 512 threads");

// Probe builds only (bench/build_variant.sh NAME -DKBMLA_BLOCK_SPLIT_SPIKE=N
// kernel_fp8_block_split.cu; wrong outputs, timing only): bit 2, S has group 0's product
// only; bit 4, P V skips its V^T loads, their factors and its wgmma. Which role's work sets
// the pace (bench/NOTES.md v39: each shortens the call, so no single role does; bit 1,
// which skipped the P tiles, went with them in v51). 0, the shipped kernel.
#ifndef KBMLA_BLOCK_SPLIT_SPIKE
#define KBMLA_BLOCK_SPLIT_SPIKE 0
#endif
constexpr int kBlockSplitSpike = KBMLA_BLOCK_SPLIT_SPIKE;

struct BlockSplitLayout : SmemLayoutT<false> {
  using Base = SmemLayoutT<false>;
  // Per-stage row factors over the hand-over slots' row_scale and row_max (both unused).
  static_assert(Base::row_scale + 4 * Base::kStages * kRowsPerCta <= Base::group_factors, "per-stage row factors");
  static_assert(Base::kStages * 4 <= Base::row_scale - Base::rescale_flags, "per-stage rescale flags");
  // The block's P (e4m3, 64 rows x 64 tokens, 64-byte swizzle) over the stage's rope box.
  static_assert(kRowsPerCta * kBlockTokens <= (kQkBoxes - kRopeBox) * fp8::kBoxBytes, "P fits the rope box");
  static_assert((kRopeBox * fp8::kBoxBytes) % 512 == 0, "P is swizzled (512-byte atoms)");
  // The item's Q row scales when the P V warpgroups quantise Q (p.q_inline): in the unused
  // own-P buffers (the split kernel's P lives over the stage's rope box).
  static constexpr uint32_t q_scales = Base::own_p;
  static_assert(4 * kRowsPerCta <= 2 * 2 * Base::kPBytes, "Q row scales fit the own-P buffers");
  static constexpr uint32_t split_barriers = (Base::end + 7) / 8 * 8;
  static constexpr uint32_t split_end = split_barriers + fp8::SplitBarriers<Base::kStages>::kBytes;
  static constexpr uint32_t alloc = split_end + 1024;
};
static_assert(BlockSplitLayout::alloc <= 232448, "over the sm_90 shared-memory limit per CTA");

// P (fp32 in the S fragment layout, s of BlockWideRows after exponentials) as one e4m3
// tile in the per-tensor kernel's token order (fp8::store_p_words).
__device__ __forceinline__ void store_p_e4m3(const float (&p)[32], uint8_t* tile, int r0, int r1, int col_pair) {
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    fp8::store_p_words(tile, r0, r1, col_pair, g, fp8::e4m3x4(p[8 * g + 0], p[8 * g + 1], p[8 * g + 4], p[8 * g + 5]),
                       fp8::e4m3x4(p[8 * g + 2], p[8 * g + 3], p[8 * g + 6], p[8 * g + 7]));
  }
}

// Four e4m3 (one A-fragment register) times two f16 factor pairs: bytes 0, 1 by lo, bytes
// 2, 3 by hi, rounded back to e4m3 (satfinite; the factors are <= 1).
__device__ __forceinline__ uint32_t scale_e4m3x4(uint32_t w, __half2 lo, __half2 hi) {
  auto up = [](uint32_t pair) {
    const __half2_raw r = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(pair), __NV_E4M3);
    return *reinterpret_cast<const __half2*>(&r);
  };
  auto down = [](__half2 h) {
    return uint32_t(__nv_cvt_halfraw2_to_fp8x2(static_cast<__half2_raw>(h), __NV_SATFINITE, __NV_E4M3));
  };
  return down(__hmul2(up(w & 0xffffu), lo)) | (down(__hmul2(up(w >> 16), hi)) << 16);
}

// The A fragments of P V k-step kb with the group factors on V: V^T x scale_g / M_g. A
// fragment register of k-step kb holds tokens 32 kb + {2c, 2c + 1, 2c + 8, 2c + 9} (c =
// lane % 4; +16 for registers 2, 3: fp8::load_vt_half), i.e. the helper's half2 ratio
// pairs 16 kb + c, + 4 (+ 8, + 12). M blocks 0, 1 are group 2 pv's dims, 2, 3 group 2 pv + 1's.
__device__ __forceinline__ void load_scaled_vt_half(int pv, uint32_t stage_addr, uint32_t zero_addr, int warp, int lane,
                                                    int valid_tokens, int kb, const __half2* ratios,
                                                    uint32_t (&a)[4][4]) {
  const int c = lane % 4;
  fp8::load_vt_half(pv, stage_addr, zero_addr, warp, lane, valid_tokens, kb, a);
#pragma unroll
  for (int gg = 0; gg < 2; ++gg) {
    const __half2* rg = ratios + (2 * pv + gg) * 32 + 16 * kb + c;
    const __half2 q0 = rg[0], q1 = rg[4], q2 = rg[8], q3 = rg[12];
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) {
      uint32_t(&ab)[4] = a[2 * gg + bb];
      ab[0] = scale_e4m3x4(ab[0], q0, q1);
      ab[1] = scale_e4m3x4(ab[1], q0, q1);
      ab[2] = scale_e4m3x4(ab[2], q2, q3);
      ab[3] = scale_e4m3x4(ab[3], q2, q3);
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
    if (p.q_inline) {
      // The P V warpgroups' quantised latent part and row scales, and the rope box by TMA.
      Mbarrier::wait(q_full, item_count & 1);
      rows.begin_item(p, it, fp8::QScales{reinterpret_cast<const float*>(smem + L::q_scales), 1, kRowsPerCta - 1});
    } else {
      rows.begin_item(p, it, fp8::global_q_scales(p, it));
      Mbarrier::wait(q_full, item_count & 1);
    }
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
      store_p_e4m3(rows.s, smem + L::kv + stage * kStageBytes + kRopeBox * fp8::kBoxBytes, rows.r0, rows.r1,
                   rows.col_pair);
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
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  uint64_t* empty = bars + 2 + kStages;
  const auto [p_full, stats_full, stats_empty] = fp8::SplitBarriers<kStages>(smem + L::split_barriers);
  const volatile int32_t* stage_flags = reinterpret_cast<int32_t*>(smem + L::stage_flags);
  const volatile uint32_t* rescale_flags = reinterpret_cast<uint32_t*>(smem + L::rescale_flags);
  const float* row_scale = reinterpret_cast<float*>(smem + L::row_scale);
  const float2* row_stats = reinterpret_cast<float2*>(smem + L::row_stats);
  const float4* factors = reinterpret_cast<const float4*>(smem + L::group_factors);
  const uint32_t kv_addr = smem_addr(smem + L::kv);
  const __half2* ratios = reinterpret_cast<const __half2*>(smem + L::p_ratios);  // [stage][group][32 pairs]
  // The block's P tile, over the stage's rope box (the softmax warpgroup's store_p_e4m3).
  auto p_desc = [](uint32_t stage_addr) { return desc_k_major_sw64(stage_addr + kRopeBox * fp8::kBoxBytes); };
  const uint32_t zero_addr = smem_addr(smem + L::zero_row);
  int item_count = 0, block_count = 0;
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item(p, w);
    if (!it.run) continue;
    if (p.q_inline) {
      // A bf16 Q's latent part quantised here (q_inline_fp8.cuh; the host asks for it with
      // one item per CTA, bench/NOTES.md v52): these warpgroups hold no O between items. The
      // tile is free once the softmax warpgroup's last S of the previous item read it.
      Mbarrier::wait(q_empty, (item_count & 1) ^ 1);
      // (64 groups of 8 columns: the 512 latent ones; the bf16 rope box comes by TMA.)
      fp8::quantise_q_tile<64, kRowsPerCta, L::kQLatentBoxBytes>(
          p, it, smem + L::q, reinterpret_cast<float*>(smem + L::q_scales), 4 * pv + warp, lane);
      if (pv == 0 && tid == 0) Mbarrier::arrive(q_full);  // (q_full counts it beside the rope's TMA)
    }
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
      const uint32_t phase = (block_count / kStages) & 1;
      Mbarrier::wait(p_full + stage, phase);
      bad |= stage_flags[stage] != 0;
      const uint32_t stage_addr = kv_addr + stage * kStageBytes;
      if (rescale_flags[stage] != 0) fp8::rescale_ot(o, row_scale + stage * 64, col_pair);
      // O of the groups in units of M_g: rescaled when M_g grew; the last block's M_g ends it.
      rescale_groups(pv, o, factors, stage);
      if (blk + 1 == it.blk_end) group_max = own_groups(pv, factors[3 * stage]);
      if constexpr ((kBlockSplitSpike & 4) == 0) {
#pragma unroll
        for (int kb = 0; kb < 2; ++kb) {
          uint32_t a[4][4];  // V^T x the group factors, one k-step
          load_scaled_vt_half(pv, stage_addr, zero_addr, warp, lane, it.seqlen - blk * kBlockTokens, kb,
                              ratios + stage * kGroups * 32, a);
          fp8::pv_step(a, p_desc(stage_addr), kb, o);
        }
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
