// Consumer roles of the fp8 kernel. The two consumer warpgroups take the KV blocks in
// turn (by the parity of the CTA's block counter): the owner of a block computes S (e4m3;
// S = Q K^T for tiles of more than 16 rows, S^T = K Q^T for at most 16: rows_fp8.cuh) and
// the online softmax, and hands P (e4m3, written over the stage's rope box), the per-row
// rescale factors and the running row maxima (per stage)
// to the other;
// both add O^T += V^T P^T for their 256 dims, V^T taken from the stage into registers by
// ldmatrix.trans (config_fp8.hpp says why and how tokens and dims are ordered).
// Why alternate: with one softmax owner (v14) the block's S, softmax and P V ran one after
// the other on one warpgroup while the other waited (ncu: 61 % of its time at the P
// barrier); now one consumer's S runs on the tensor cores while the other's softmax runs,
// and only the row-maximum hand-over (block k's softmax needs the maxima after block k - 1)
// is serial. A consumer defers the P V of the other's block until after its own next
// softmax, so that hand-over is the only wait on the softmax chain.
// S of row r is scaled by softmax_scale x kv_scale x the row's Q scale (per row, or the
// one scale of a caller's e4m3 Q); P <= 2^kRescaleSlack = 256 < 448, the
// e4m3 maximum; O is multiplied by kv_scale in the epilogue.
//
// O^T accumulators o[b] (b = 0..3: dims 256 wg + 64 b ..): lane l of warp w holds output
// rows n = 8i + 2(l%4) + e (i < 8, e < 2) at dims 256 wg + 64 b + 16 w + 2(l/4) + {0, 1},
// as o[b][4i + e] (even dim) and o[b][4i + 2 + e] (odd dim). With at most 16 query rows
// (heads x q_len <= 16, one CTA per tile) P V runs with N = 16 (m64n16k32: kAcc = 8
// accumulators per M block instead of 32, i < 2): the tile's other 48 rows are padding,
// and N = 64 spent 4x the tensor work and P reads on them. The softmax state (max m,
// partial sum l) lives in the Rows policy (rows_fp8.cuh); each consumer sums only the P
// of its own blocks, the epilogue adds the two.
#pragma once

#include "src/sm90/decode/epilogue.cuh"
#include "src/sm90/decode/q_inline_fp8.cuh"
#include "src/sm90/decode/rows_fp8.cuh"

namespace kbmla::sm90::fp8 {

// The V^T fragments of one consumer warp for a block: a[b][kb] is the A operand of
// M block b (16 dims of this warp: dims 256 wg + 64 b + 16 warp ..) and k-step kb (tokens
// 32 kb..32 kb + 31). ldmatrix lane l addresses token 32 kb + l (matrix l / 8, row l % 8),
// or the zero row when that token is past the request's last one. The dims' 16 bytes are
// chunk 4 (b % 2) + warp of the 128-byte rows of latent box 2 wg + b / 2 (both fp8 caches'
// stages have 128-byte latent boxes).
// After .trans, register j of lane l holds bytes (t, 2r), (t, 2r + 1), (t + 1, 2r),
// (t + 1, 2r + 1) for t = 32 kb + 8 j + 2(l%4), r = l/4 (token, dim in the chunk); the
// permutes gather the even dim (row x = r) and the odd dim (row x + 8) of tokens t, t + 1,
// t + 8, t + 9.
__device__ __forceinline__ void load_vt_fragments(int wg, uint32_t stage_addr, uint32_t zero_addr, int warp, int lane,
                                                  int valid_tokens, uint32_t (&a)[4][2][4]) {
#pragma unroll
  for (int kb = 0; kb < 2; ++kb) {
    const bool real = 32 * kb + lane < valid_tokens;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint32_t addr = stage_addr + (2 * wg + b / 2) * kLatentBoxBytes + (32 * kb + lane) * kLatentBoxRowBytes +
                            ((((4 * (b % 2) + warp) ^ lane) & 7) << 4);
      uint32_t r[4];
      ldmatrix_x4_trans(real ? addr : zero_addr, r);
      a[b][kb][0] = __byte_perm(r[0], r[1], 0x6420);
      a[b][kb][1] = __byte_perm(r[0], r[1], 0x7531);
      a[b][kb][2] = __byte_perm(r[2], r[3], 0x6420);
      a[b][kb][3] = __byte_perm(r[2], r[3], 0x7531);
    }
  }
}

// O^T columns (output rows 8i + col_pair + e) times the block's row factors.
template <int kAcc>
__device__ __forceinline__ void rescale_ot(float (&o)[4][kAcc], const float* row_scale, int col_pair) {
#pragma unroll
  for (int i = 0; i < kAcc / 4; ++i) {
    const float2 f = *reinterpret_cast<const float2*>(row_scale + 8 * i + col_pair);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      o[b][4 * i + 0] *= f.x;
      o[b][4 * i + 2] *= f.x;
      o[b][4 * i + 1] *= f.y;
      o[b][4 * i + 3] *= f.y;
    }
  }
}

template <int N>
__device__ __forceinline__ void fence_accumulators(float (&d)[4][N]) {
#pragma unroll
  for (int b = 0; b < 4; ++b) sm90::fence_accumulators(d[b]);
}

// Pins the fragments' permutes before wgmma.fence: defined between two register-A wgmma
// they make ptxas insert a fence before each (C7519).
__device__ __forceinline__ void fence_fragments(uint32_t (&a)[4][2][4]) {
#pragma unroll
  for (int b = 0; b < 4; ++b) {
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) {
#pragma unroll
      for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[b][kb][j])::"memory");
    }
  }
}

// O^T (4 x 64 dims x 64 rows) += V^T (dims x 64 tokens) P^T: 8 wgmma of one commit
// group over the V^T fragments and the owner's P tile; the caller waits.
template <int kAcc>
__device__ __forceinline__ void issue_pv(float (&o)[4][kAcc], uint32_t (&a)[4][2][4], uint64_t p_desc) {
  wgmma_fence();
  fence_accumulators(o);
#pragma unroll
  for (int b = 0; b < 4; ++b) {
#pragma unroll
    for (int kb = 0; kb < 2; ++kb) wgmma_pv_fp8_rs(a[b][kb], desc_advance(p_desc, kb * 32), o[b]);
  }
  wgmma_commit();
}

// What the per-tensor fp8 kernel's consumers do differently from the per-block kernel's
// (consumer_fp8_block.cuh, PerBlockScaling), for run_consumer_loop: the stage wait, the
// hand-over slot (one per stage), S and P of the owner's block (Rows: S = Q K^T or, for at
// most 16 rows, S^T), one P tile per block over the stage's rope box, O scaled by kv_scale
// in the epilogue.
template <int QkBoxes, int kAcc_>
struct PerTensorScaling {
  using Layout = SmemLayout;
  using Rows = std::conditional_t<kAcc_ == 8, NarrowRows<QkBoxes>, WideRows<QkBoxes>>;
  static constexpr int kAcc = kAcc_;
  static constexpr int kStages = fp8::kStages;
  static constexpr int kSlots = fp8::kStages;  // the hand-over of a block lives with its stage
  static constexpr uint32_t kStageBytes = kTileBytes;
  uint64_t* full;
  uint8_t* kv;
  float kv_scale;

  __device__ __forceinline__ PerTensorScaling(const DecodeParams& p, uint8_t* smem)
      : full(reinterpret_cast<uint64_t*>(smem + Layout::barriers) + 2), kv(smem + Layout::kv), kv_scale(*p.kv_scale) {}

  __device__ __forceinline__ void wait_stage(int stage, uint32_t phase) const { Mbarrier::wait(full + stage, phase); }
  // A bf16 Q is quantised by the consumers (p.q_inline; q_inline_fp8.cuh): kQRows rows of
  // the tile, the 16 that S^T reads for the narrow tiles.
  static constexpr bool kInlineQ = true;
  static constexpr bool kRopeByTma = false;  // the rope columns are quantised with the rest
  static constexpr bool kEarlyQRelease = true;  // (run_consumer_loop)
  static constexpr int kQRows = kAcc_ == 8 ? 16 : kRowsPerCta;
  static constexpr int kQGroups = QkBoxes * 8;  // 16-byte groups of a bf16 row: 72 or 64
  static constexpr uint32_t kQBoxBytes = kLatentBoxBytes;
  __device__ __forceinline__ void begin_item(Rows& rows, const DecodeParams& p, const Item& it, QScales qs) const {
    rows.begin_item(p, it, kv_scale, qs);
  }
  __device__ __forceinline__ void block_max(Rows& rows, int wg, uint32_t q_addr, uint32_t stage_addr, int, int blk,
                                            float* exchange) const {
    rows.block_max(wg, q_addr, stage_addr, blk, exchange);
  }
  // P over the stage's rope box (S, the only reader of that box, has completed).
  __device__ __forceinline__ void write_p(Rows& rows, int, int stage, int warp, int lane) const {
    rows.write_p(kv + stage * kTileBytes + kPBox * kBoxBytes, warp, lane);
  }
  __device__ __forceinline__ void begin_o(float (&)[4][kAcc]) {}
  __device__ __forceinline__ void before_pv(float (&)[4][kAcc], int, int, bool) {}
  // Both consumers' P V read the owner's P tile over the stage's rope box.
  __device__ __forceinline__ void issue_pv_other(float (&o)[4][kAcc], uint32_t (&a)[4][2][4], uint32_t stage_addr,
                                                 int) const {
    issue_pv(o, a, desc_k_major_sw64(stage_addr + kPBox * kBoxBytes));
  }
  __device__ __forceinline__ void issue_pv_own(float (&o)[4][kAcc], uint32_t (&a)[4][2][4], uint32_t stage_addr,
                                               int wg) const {
    issue_pv_other(o, a, stage_addr, wg);
  }
  __device__ __forceinline__ void finish_o(float (&)[4][kAcc]) const {}
  __device__ __forceinline__ float out_scale() const { return kv_scale; }
};

// Probe builds only (bench/build_variant.sh NAME "-DKBMLA_NARROW_PHASES_WG=1
// -DKBMLA_NARROW_PHASE4_AFTER_PUBLISH=1" kernel_fp8.cu): the narrow tiles' item phases as
// consumer 1 sees them, and the output phase ending after publish_partials.
#ifndef KBMLA_NARROW_PHASES_WG
#define KBMLA_NARROW_PHASES_WG 0
#endif
#ifndef KBMLA_NARROW_PHASE4_AFTER_PUBLISH
#define KBMLA_NARROW_PHASE4_AFTER_PUBLISH 0
#endif
constexpr int kNarrowPhasesWg = KBMLA_NARROW_PHASES_WG;
constexpr bool kNarrowPhase4AfterPublish = KBMLA_NARROW_PHASE4_AFTER_PUBLISH != 0;

// The consumer loop of both fp8 kernels (the top of this file says how the two consumers
// share the blocks); Scaling supplies what the cache formats do differently. kFixedWg: this
// consumer's index as a constant (0, 1), or -1 to take `wg_arg` at run time (kernel_fp8.cu,
// kTwoCopies, says when each is used).
template <KernelMode Mode, int kFixedWg, class Scaling>
__device__ __forceinline__ void run_consumer_loop(const DecodeParams& p, uint8_t* smem, int wg_arg, Scaling sc) {
  using Layout = typename Scaling::Layout;
  constexpr int kAcc = Scaling::kAcc;
  constexpr int kStages = Scaling::kStages;
  constexpr int kSlots = Scaling::kSlots;
  const int wg = kFixedWg >= 0 ? kFixedWg : wg_arg;
  // A bf16 Q quantised here (p.q_inline): not in the 2-CTA cluster kernels (kFixedWg >= 0),
  // whose consumers have no registers for it (the host never asks them to).
  constexpr bool kMayQuantiseQ = Scaling::kInlineQ && kFixedWg < 0;
  const int other = 1 - wg;
  const int tid = threadIdx.x - 128 * (wg + 1);
  const int warp = tid / 32, lane = tid % 32;
  const int col_pair = 2 * (lane % 4);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Layout::barriers);
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  uint64_t* empty = bars + 2 + kStages;
  const volatile int32_t* stage_flags = reinterpret_cast<int32_t*>(smem + Layout::stage_flags);
  // The owner's hand-over of each block, in its slot (config_fp8.hpp, config_fp8_block.hpp).
  const HandOver hand_over{reinterpret_cast<float*>(smem + Layout::row_scale),
                           reinterpret_cast<float*>(smem + Layout::row_max),
                           reinterpret_cast<uint32_t*>(smem + Layout::rescale_flags)};
  const float* row_scale = hand_over.row_scale;
  float2* row_stats = reinterpret_cast<float2*>(smem + Layout::row_stats);  // [parity][consumer][64]
  float* row_exchange = narrow_row_exchange(row_stats, wg);
  const uint32_t q_addr = smem_addr(smem + Layout::q);
  const uint32_t kv_addr = smem_addr(smem + Layout::kv);
  const uint32_t zero_addr = smem_addr(smem + Layout::zero_row);
  typename Scaling::Rows rows(warp, lane);

  int item_count = 0;
  int block_count = 0;
  if (wg == 0 && p.timeline != nullptr && tid == 0) record_timeline_start(p);
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item(p, w);
    if (!it.run) continue;
    // (Tiles of at most 16 rows only: in the wide consumers the timestamps moved ptxas's
    // spills, 44 / 40 -> 44 / 56 bytes, and the per-block kernel's 288 / 300 -> 296 / 324.)
    const bool phases = kAcc == 8 && wg == kNarrowPhasesWg && p.item_timeline != nullptr && tid == 0;
    if (phases) record_item_phase(p, item_count, 0);
    // (Context-parallel positions are checked by the Q loader thread.)
    // (p is in the constant bank: testing p.q_inline again costs no register.)
    if (kMayQuantiseQ && p.q_inline) {
      // The previous item's row-statistics barrier was the last point where S could read
      // its Q tile, so the tile is free to overwrite.
      if constexpr (kMayQuantiseQ) {
        float* q_scales = reinterpret_cast<float*>(smem + Layout::q_scales);
        quantise_q_tile<Scaling::kQGroups, Scaling::kQRows, Scaling::kQBoxBytes>(p, it, smem + Layout::q, q_scales,
                                                                                 4 * wg + warp, lane);
        sc.begin_item(rows, p, it, QScales{q_scales, 1, kRowsPerCta - 1});
        if constexpr (Scaling::kRopeByTma) Mbarrier::wait(q_full, item_count & 1);
      }
    } else {
      sc.begin_item(rows, p, it, global_q_scales(p, it));
      Mbarrier::wait(q_full, item_count & 1);
    }
    if (phases) record_item_phase(p, item_count, 1);

    float o[4][kAcc];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) o[b][i] = 0.f;
    }
    sc.begin_o(o);
    bool bad = false;
    // The other's block just before this one (same item) waits for its P V until after
    // this consumer's next softmax.
    bool deferred = false;
    // A Q tile that the Q loader fills (TMA) is given back after this consumer's last S of
    // the item (its last own block is one of the item's last two), so that the next item's
    // Q load overlaps the item's last P V and the epilogue (per-tensor: kimi_lognormal_B64_Sq4_H12
    // 92.7 -> 91.1 us, lognormal_H16_Sq4 238.0 -> 235.1, B32_Sq4 205.7 -> 203.5).
    const bool q_by_tma = Scaling::kRopeByTma || !(kMayQuantiseQ && p.q_inline);
    bool q_given = false;

    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kStages;
      sc.wait_stage(stage, (block_count / kStages) & 1);
      if (phases && blk == it.blk_begin) record_item_phase(p, item_count, 2);
      bad |= stage_flags[stage] != 0;
      if constexpr (Mode == KernelMode::kLoadOnly) {
        release_stage(empty + stage, lane, p.cluster_size);
        continue;
      }
      const uint32_t stage_addr = kv_addr + stage * Scaling::kStageBytes;
      const int valid_tokens = it.seqlen - blk * kBlockTokens;
      const bool last = blk + 1 == it.blk_end;
      // The hand-over slots of this block and of the deferred one (the block before).
      const int slot = block_count % kSlots;
      const int deferred_slot = (block_count + kSlots - 1) % kSlots;
      if ((block_count & 1) != wg) {
        // The other consumer's block: deferred, unless it ends the item.
        if (!last) {
          deferred = true;
          continue;
        }
        named_sync(kBarFp8StatsReady + other, kConsumerThreads);
        const bool rescale = hand_over.rescale_flags[slot] != 0;
        rows.take_over(hand_over, slot, rescale);
        named_sync(p_ready_barrier(other, block_count), kConsumerThreads);
        if (rescale) rescale_ot(o, row_scale + slot * 64, col_pair);
        sc.before_pv(o, wg, stage, true);
        uint32_t a[4][2][4];
        load_vt_fragments(wg, stage_addr, zero_addr, warp, lane, valid_tokens, a);
        fence_fragments(a);
        sc.issue_pv_other(o, a, stage_addr, wg);
        wgmma_wait<0>();
        fence_accumulators(o);
        release_stage(empty + stage, lane, p.cluster_size);
        continue;
      }

      // Own block: S, the online softmax, P.
      sc.block_max(rows, wg, q_addr, stage_addr, stage, blk, row_exchange);
      if (Scaling::kEarlyQRelease && q_by_tma && blk + 2 >= it.blk_end) {
        Mbarrier::arrive(q_empty);
        q_given = true;
      }
      // The deferred block is the one before this, in the stage before this one.
      const int deferred_stage = (block_count + kStages - 1) % kStages;
      bool deferred_rescale = false;
      if (deferred) {
        named_sync(kBarFp8StatsReady + other, kConsumerThreads);
        deferred_rescale = hand_over.rescale_flags[deferred_slot] != 0;
        rows.take_over(hand_over, deferred_slot, deferred_rescale);
      }
      // The hand-over first: the other consumer's next softmax waits only for it.
      const bool rescale = rows.publish(wg, hand_over, slot, tid);
      sc.write_p(rows, wg, stage, warp, lane);
      fence_view_async_shared();
      named_arrive(p_ready_barrier(wg, block_count), kConsumerThreads);
      // Our own P V reads the P of all four of our warps.
      named_sync(kBarFp8OwnerP + wg, 128);
      // The deferred block's P V, then ours; our fragments load while the deferred
      // block's wgmma run (their shared-memory latency was ~9 % of a consumer's time).
      uint32_t a_own[4][2][4];
      if (deferred) {
        named_sync(p_ready_barrier(other, block_count - 1), kConsumerThreads);
        const uint32_t deferred_addr = kv_addr + deferred_stage * Scaling::kStageBytes;
        if (deferred_rescale) rescale_ot(o, row_scale + deferred_slot * 64, col_pair);
        sc.before_pv(o, wg, deferred_stage, false);
        uint32_t a_deferred[4][2][4];
        load_vt_fragments(wg, deferred_addr, zero_addr, warp, lane, valid_tokens + kBlockTokens,
                                                a_deferred);
        fence_fragments(a_deferred);
        sc.issue_pv_other(o, a_deferred, deferred_addr, wg);
        load_vt_fragments(wg, stage_addr, zero_addr, warp, lane, valid_tokens, a_own);
        fence_fragments(a_own);
        wgmma_wait<0>();
        fence_accumulators(o);
        release_stage(empty + deferred_stage, lane, p.cluster_size);
        deferred = false;
      } else {
        load_vt_fragments(wg, stage_addr, zero_addr, warp, lane, valid_tokens, a_own);
        fence_fragments(a_own);
      }
      if (rescale) rescale_ot(o, row_scale + slot * 64, col_pair);
      sc.before_pv(o, wg, stage, last);
      sc.issue_pv_own(o, a_own, stage_addr, wg);
      wgmma_wait<0>();
      fence_accumulators(o);
      release_stage(empty + stage, lane, p.cluster_size);
    }
    if (q_by_tma && !q_given) Mbarrier::arrive(q_empty);  // (per-block, or no own block)
    if (phases) record_item_phase(p, item_count, 3);
    ++item_count;

    sc.finish_o(o);
    // Row statistics: each consumer's (max, partial sum); the maxima agree (each took the
    // other's over with its blocks).
    float2* stats = row_stats + (item_count & 1) * 2 * kRowsPerCta;
    rows.publish_stats(wg, stats + wg * kRowsPerCta, row_exchange, warp, lane);
    named_sync(kBarRowStats, kConsumerThreads);
    write_item_output_transposed(p, it, wg, warp, lane, stats, sc.out_scale(), bad, o);
    if (!kNarrowPhase4AfterPublish && phases) record_item_phase(p, item_count - 1, 4);
    publish_partials(p, it, wg * 128 + tid);
    if (kNarrowPhase4AfterPublish && phases) record_item_phase(p, item_count - 1, 4);
  }
  if (wg == 0 && p.timeline != nullptr && tid == 0) record_timeline_end(p, item_count);
}

template <KernelMode Mode, int QkBoxes, int kAcc, int kFixedWg = -1>
__device__ __forceinline__ void run_consumer_fp8(const DecodeParams& p, uint8_t* smem, int wg) {
  run_consumer_loop<Mode, kFixedWg>(p, smem, wg, PerTensorScaling<QkBoxes, kAcc>(p, smem));
}

}  // namespace kbmla::sm90::fp8
