// Consumer roles of the fp8 kernel: as consumer.cuh (consumer 0 computes S and the online
// softmax and hands P and the rescale factors to consumer 1; each adds P V for 256 columns),
// with e4m3 operands. S of row r is scaled by softmax_scale x kv_scale x q_scale[r] (the
// row's Q quantisation scale); P goes to shared memory as e4m3 (P <= 2^kRescaleSlack =
// 256 < 448, the e4m3 maximum); O is multiplied by kv_scale before the epilogue.
// Fragment layout of the fp32 accumulators: as in consumer.cuh.
#pragma once

#include <cuda_fp8.h>

#include "src/sm90/decode/config_fp8.hpp"
#include "src/sm90/decode/consumer.cuh"
#include "src/sm90/decode/transpose_v.cuh"

namespace kbmla::sm90::fp8 {

template <int QkBoxes, bool kSoftmaxOwner>
__device__ __forceinline__ void run_consumer_fp8(const DecodeParams& p, uint8_t* smem) {
  constexpr int wg = kSoftmaxOwner ? 0 : 1;
  const int tid = threadIdx.x - 128 * (wg + 1);
  const int warp = tid / 32, lane = tid % 32;
  const int r0 = warp * 16 + lane / 4, r1 = r0 + 8;
  const int col_pair = 2 * (lane % 4);
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  uint64_t* full = bars + 2;
  uint64_t* empty = bars + 2 + kStages;
  uint64_t* vt_full = bars + 2 + 2 * kStages;
  const volatile int32_t* stage_flags = reinterpret_cast<int32_t*>(smem + SmemLayout::stage_flags);
  float* row_scale = reinterpret_cast<float*>(smem + SmemLayout::row_scale);
  float2* row_stats = reinterpret_cast<float2*>(smem + SmemLayout::row_stats);
  uint8_t* p_tile = smem + SmemLayout::p;
  const uint32_t q_addr = smem_addr(smem + SmemLayout::q);
  const uint32_t kv_addr = smem_addr(smem + SmemLayout::kv);
  const uint32_t vt_addr = smem_addr(smem + SmemLayout::vt);
  const uint32_t p_addr = smem_addr(p_tile);
  const float neg_inf = -__int_as_float(0x7f800000);
  const float kv_scale = *p.kv_scale;

  int item_count = 0;
  int block_count = 0;
  const unsigned long long start_ns = kSoftmaxOwner && p.timeline != nullptr ? global_timer_ns() : 0;
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item(p, w);
    if (!it.run) continue;
    if (kSoftmaxOwner && threadIdx.x % 128 == 0 && !p.vis.consistent(it.batch, it.seqlen)) {
      atomicOr(p.error_word, kErrDcpPositions);
    }
    const int vis0 = visible_keys(p, it.batch, it.seqlen, it.row_begin + r0);
    const int vis1 = visible_keys(p, it.batch, it.seqlen, it.row_begin + r1);
    // log2-domain factor of S per row: softmax scale x kv scale x the row's Q scale (rows
    // past the request's rows read a neighbour's scale; they are never written out).
    float f0 = 0.f, f1 = 0.f;
    if constexpr (kSoftmaxOwner) {
      const int64_t row_base = int64_t{it.batch} * p.rows;
      const int q0 = min(it.row_begin + r0, p.rows - 1), q1 = min(it.row_begin + r1, p.rows - 1);
      f0 = p.scale_log2 * kv_scale * p.q_scale[row_base + q0];
      f1 = p.scale_log2 * kv_scale * p.q_scale[row_base + q1];
      Mbarrier::wait(q_full, item_count & 1);
    }

    float o[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    float m0 = neg_inf, m1 = neg_inf, l0 = 0.f, l1 = 0.f;
    bool bad = false;

    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kStages;
      Mbarrier::wait(full + stage, (block_count / kStages) & 1);
      bad |= stage_flags[stage] != 0;
      const uint32_t stage_addr = kv_addr + stage * kTileBytes;
      float alpha0, alpha1;
      if constexpr (kSoftmaxOwner) {
        // S (64 x 64) = Q K^T: 18 (d_qk 576) or 16 (512) k-steps of 32, two per 64-byte box.
        float s[32];
        wgmma_fence();
#pragma unroll
        for (int k = 0; k < QkBoxes * 2; ++k) {
          const uint32_t off = (k / 2) * kBoxBytes + (k % 2) * 32;
          wgmma_qk_fp8(desc_k_major_sw64(q_addr + off), desc_k_major_sw64(stage_addr + off), s, k > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        fence_accumulators(s);

        mask_invisible_keys(s, blk, col_pair, vis0, vis1);
        // f0, f1 >= 0, so max(s) x f = max(s x f).
        float mx0, mx1;
        block_row_max(s, mx0, mx1);
        alpha0 = lazy_rescale(mx0 * f0, m0);
        alpha1 = lazy_rescale(mx1 * f1, m1);
        const float neg_base0 = neg_base(m0), neg_base1 = neg_base(m1);
        if (block_count > 0) named_sync(kBarPFree, kConsumerThreads);
        float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float p00 = fast_exp2(fmaf(s[4 * i + 0], f0, neg_base0));
          const float p01 = fast_exp2(fmaf(s[4 * i + 1], f0, neg_base0));
          const float p10 = fast_exp2(fmaf(s[4 * i + 2], f1, neg_base1));
          const float p11 = fast_exp2(fmaf(s[4 * i + 3], f1, neg_base1));
          sum0 += p00 + p01;
          sum1 += p10 + p11;
          const int key = 8 * i + col_pair;
          *reinterpret_cast<__nv_fp8x2_storage_t*>(p_tile + swizzled64(r0, key)) =
              __nv_cvt_float2_to_fp8x2(make_float2(p00, p01), __NV_SATFINITE, __NV_E4M3);
          *reinterpret_cast<__nv_fp8x2_storage_t*>(p_tile + swizzled64(r1, key)) =
              __nv_cvt_float2_to_fp8x2(make_float2(p10, p11), __NV_SATFINITE, __NV_E4M3);
        }
        l0 = l0 * alpha0 + sum0;
        l1 = l1 * alpha1 + sum1;
        if (lane % 4 == 0) {
          row_scale[r0] = alpha0;
          row_scale[r1] = alpha1;
        }
        fence_view_async_shared();
        named_sync(kBarP, kConsumerThreads);
      } else {
        // Consumer 1's share of V^T (rows 16 kProducerChunks..511), fenced for the async
        // proxy; the kBarP barrier below orders every writer's rows before either P V.
        transpose_chunks<kProducerChunks, kDv / 16, 128>(smem + SmemLayout::kv + stage * kTileBytes,
                                                        smem + SmemLayout::vt + stage * kVtBytes, tid,
                                                        it.seqlen - blk * kBlockTokens);
        fence_view_async_shared();
        named_sync(kBarP, kConsumerThreads);
        alpha0 = row_scale[r0];
        alpha1 = row_scale[r1];
      }
      rescale_o(o, alpha0, alpha1);
      // O (64 x 256) += P (64 x 64) V[:, 256 wg ..]: 2 k-steps of 32 tokens over V^T.
      if constexpr (kSoftmaxOwner) Mbarrier::wait(vt_full + stage, (block_count / kStages) & 1);
      const uint32_t vt_stage = vt_addr + stage * kVtBytes + wg * 256 * 64;
      wgmma_fence();
      fence_accumulators(o);
#pragma unroll
      for (int k = 0; k < kBlockTokens / 32; ++k) {
        wgmma_pv_fp8(desc_k_major_sw64(p_addr + k * 32), desc_k_major_sw64(vt_stage + k * 32), o);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(o);
      if constexpr (!kSoftmaxOwner) named_arrive(kBarPFree, kConsumerThreads);
      release_stage(empty + stage, lane, p.cluster_size);
    }
    Mbarrier::arrive(q_empty);
    ++item_count;

    float2* stats = row_stats + (item_count & 1) * kRowsPerCta;
    if constexpr (kSoftmaxOwner) publish_row_stats(stats, lane, r0, r1, m0, m1, l0, l1);
    named_sync(kBarRowStats, kConsumerThreads);
    const float2 st0 = stats[r0], st1 = stats[r1];
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] *= kv_scale;
    write_item_output(p, it, wg, lane, r0, st0.x, st0.y, bad, o, 0);
    write_item_output(p, it, wg, lane, r1, st1.x, st1.y, bad, o, 2);
  }
  if (kSoftmaxOwner && p.timeline != nullptr && tid == 0) record_timeline(p, start_ns, item_count);
  if (kSoftmaxOwner && block_count > 0) named_sync(kBarPFree, kConsumerThreads);
}

}  // namespace kbmla::sm90::fp8
