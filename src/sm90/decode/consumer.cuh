// The bf16 kernel's 64-row consumers (TileMath64; the walk they share with the narrow
// consumers is consumer_loop.cuh's) and the softmax pieces the fp8 consumers share.
// Consumer 0 computes S = Q K^T of each 64-token block (N = 64, Q read once), the online
// softmax in the log2 domain, and hands consumer 1 the block's P (bf16, shared memory) and
// the per-row factor by which to rescale O; both then add P V for their 256 columns of V.
// Consumer 0 owns the row statistics (max, sum) and publishes them at the end of an item
// for consumer 1's epilogue.
//
// Accumulator fragments (wgmma m64nN, fp32): warp w of the warpgroup owns rows
// 16w..16w+15; lane l holds rows r0 = 16w + l/4 and r1 = r0 + 8, columns
// 8i + 2(l%4) + {0,1} for i < N/8, as d[4i+0..1] (row r0) and d[4i+2..3] (row r1).
#pragma once

#include <cuda_bf16.h>

#include "src/sm90/decode/consumer_loop.cuh"
#include "src/sm90/decode/epilogue.cuh"
#include "src/sm90/decode/fma_exp2.hpp"
#include "src/sm90/decode/primitives.cuh"
#include "src/sm90/decode/work.cuh"

namespace kbmla::sm90 {

// Byte offset of element (row, col) in a 64 x 64 bf16 tile with 128-byte rows and the
// 128-byte swizzle (16-byte chunk index XOR row % 8), as TMA and wgmma lay it out.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int col) {
  return row * 128 + ((((col >> 3) ^ row) & 7) << 4) + (col & 7) * 2;
}

__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// The pieces of the online softmax both kernels' consumers share (bf16 here, e4m3 in
// consumer_fp8.cuh); s is the S fragment of rows r0 (s[4i+0..1]) and r1 (s[4i+2..3]).

// The first key some real row of the warp cannot see (INT_MAX if none): blocks wholly
// below it need no mask. Rows past the request's rows (the 64-row tile is larger than
// heads x q_len for small head counts) are left out: their S, P and O stay in their own row
// and are never written, so they need no mask (counting them, with 0 visible keys, made 3
// of 4 warps mask every block of the 16-head cases: 14 % of the fp8 consumer time, ncu).
__device__ __forceinline__ int warp_mask_from(const DecodeParams& p, const Item& it, int r0, int r1, int vis0,
                                              int vis1) {
  const int big = 0x7fffffff;
  const int v = min(it.row_begin + r0 < p.rows ? vis0 : big, it.row_begin + r1 < p.rows ? vis1 : big);
  return __reduce_min_sync(0xffffffffu, v);
}

// Mask (causal and seqlen tail) only in blocks that reach mask_from (warp_mask_from);
// most blocks are fully visible and skip the 64 compares.
__device__ __forceinline__ void mask_invisible_keys(float (&s)[32], int blk, int col_pair, int vis0, int vis1,
                                                    int mask_from) {
  const float neg_inf = -__int_as_float(0x7f800000);
  const int key0 = blk * kBlockTokens + col_pair;
  if ((blk + 1) * kBlockTokens > mask_from) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = key0 + 8 * i + e;
        if (key >= vis0) s[4 * i + e] = neg_inf;
        if (key >= vis1) s[4 * i + 2 + e] = neg_inf;
      }
    }
  }
}

// The block's maxima of raw S for rows r0 and r1 (over the quad that holds each row).
__device__ __forceinline__ void block_row_max(const float (&s)[32], float& mx0, float& mx1) {
  const float neg_inf = -__int_as_float(0x7f800000);
  mx0 = neg_inf;
  mx1 = neg_inf;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    mx0 = fmaxf(mx0, fmaxf(s[4 * i + 0], s[4 * i + 1]));
    mx1 = fmaxf(mx1, fmaxf(s[4 * i + 2], s[4 * i + 3]));
  }
  mx0 = quad_max(mx0);
  mx1 = quad_max(mx1);
}

// Lazy rescaling: the reference max m moves only when the block's max bm exceeds it by
// more than kRescaleSlack (log2 units), so P <= 2^kRescaleSlack (exact enough in bf16 and
// in e4m3, no overflow of the fp32 sums) and most blocks leave O alone (alpha = 1): the
// 128-multiply rescale of O was the largest item between S and PV. Returns O's factor
// (0 when m was -inf: O and l are still 0).
__device__ __forceinline__ float lazy_rescale(float bm, float& m) {
  if (bm > m + kRescaleSlack) {
    const float alpha = fast_exp2(m - bm);
    m = bm;
    return alpha;
  }
  return 1.f;
}

// The exp2 offset of a row: -m, or 0 for a row that has seen no key (m = -inf), so exp2
// gives 0, not NaN.
__device__ __forceinline__ float neg_base(float m) { return m == -__int_as_float(0x7f800000) ? 0.f : -m; }

// O rows r0 / r1 times the block's factors (most blocks: both 1, skipped).
__device__ __forceinline__ void rescale_o(float (&o)[128], float alpha0, float alpha1) {
  if (__any_sync(0xffffffff, alpha0 != 1.f || alpha1 != 1.f)) {
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      o[4 * i + 0] *= alpha0;
      o[4 * i + 1] *= alpha0;
      o[4 * i + 2] *= alpha1;
      o[4 * i + 3] *= alpha1;
    }
  }
}

// Consumer 0 at the end of an item: its quads' partial sums reduced, (max, sum) of rows
// r0 / r1 published for both consumers' epilogues.
__device__ __forceinline__ void publish_row_stats(float2* stats, int lane, int r0, int r1, float m0, float m1,
                                                  float l0, float l1) {
  l0 = quad_sum(l0);
  l1 = quad_sum(l1);
  if (lane % 4 == 0) {
    stats[r0] = make_float2(m0, l0);
    stats[r1] = make_float2(m1, l1);
  }
}

// The 64-row consumers' math (the walk is consumer_loop.cuh's): S (64 x 64) = Q K^T with
// N = 64 (Q read once), the online softmax in the log2 domain, P (bf16) in the P tile with
// the rows' factors for consumer 1, and O (64 x 256) += P V per consumer.
template <int QkBoxes, bool kSoftmaxOwner>
struct TileMath64 {
  static constexpr int wg = kSoftmaxOwner ? 0 : 1;
  // The column groups of write_p (bit i: columns 8i..8i+7) whose exponentials run on the
  // FMA pipe (fma_exp2) instead of the SFU. Consumer 0's P is on the critical path of
  // every block (both P V wait for it, the tensor cores idle), and with all 32 on the SFU
  // its stretch from S to the P barrier is SFU-bound: 8 cycles an SFU instruction, ~256 of
  // the ~325 cycles ptxas schedules there, with half the issue slots empty. Groups 3 and 7
  // (8 of 32) bring that to ~255 cycles; 4, 12 or 16 measured no faster than 8 (past 8 the
  // stretch is issue-bound; bench/NOTES.md v50).
  static constexpr unsigned kFmaExp2Columns = 0x88;
  int tid, lane, r0, r1, col_pair;
  float* row_scale;  // [64]
  uint8_t* p_tile;
  uint64_t q_desc, p_desc;
  float o[128];
  float s[32];
  float m0, m1, l0, l1;  // consumer 0 only
  float alpha0, alpha1, neg_base0, neg_base1;
  int vis0, vis1, mask_from;

  __device__ __forceinline__ explicit TileMath64(uint8_t* smem) {
    tid = threadIdx.x - 128 * (wg + 1);
    const int warp = tid / 32;
    lane = tid % 32;
    r0 = warp * 16 + lane / 4;
    r1 = r0 + 8;
    col_pair = 2 * (lane % 4);
    row_scale = reinterpret_cast<float*>(smem + SmemLayout::row_scale);
    p_tile = smem + SmemLayout::p;
    q_desc = desc_k_major(smem_addr(smem + SmemLayout::q));
    p_desc = desc_k_major(smem_addr(p_tile));
  }

  __device__ __forceinline__ void begin_item(const DecodeParams& p, const Item& it) {
    vis0 = visible_keys(p, it.batch, it.seqlen, it.row_begin + r0);
    vis1 = visible_keys(p, it.batch, it.seqlen, it.row_begin + r1);
    mask_from = warp_mask_from(p, it, r0, r1, vis0, vis1);
  }

  __device__ __forceinline__ void zero_accumulators() {
    const float neg_inf = -__int_as_float(0x7f800000);
#pragma unroll
    for (int i = 0; i < 128; ++i) o[i] = 0.f;
    m0 = neg_inf;
    m1 = neg_inf;
    l0 = 0.f;
    l1 = 0.f;
  }

  // S (64 x 64) = Q (64 x d_qk) K^T, 36 (d_qk 576) or 32 (512) k-steps of 16.
  __device__ __forceinline__ void compute_s(uint32_t stage_addr) {
    const uint64_t k_desc = desc_k_major(stage_addr);
    s_chain<QkBoxes>(s, [&](uint32_t off, bool acc) {
      wgmma_qk(desc_advance(q_desc, off), desc_advance(k_desc, off), s, acc);
    });
  }

  __device__ __forceinline__ void block_factors(const DecodeParams& p, int blk) {
    mask_invisible_keys(s, blk, col_pair, vis0, vis1, mask_from);
    float mx0, mx1;
    block_row_max(s, mx0, mx1);
    alpha0 = lazy_rescale(mx0 * p.scale_log2, m0);
    alpha1 = lazy_rescale(mx1 * p.scale_log2, m1);
    neg_base0 = neg_base(m0);
    neg_base1 = neg_base(m1);
  }

  __device__ __forceinline__ void write_p(const DecodeParams& p) {
    float sum0 = 0.f, sum1 = 0.f;
    const uint32_t p_row0 = swizzled_offset(r0, col_pair), p_row1 = swizzled_offset(r1, col_pair);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const bool on_fma = (kFmaExp2Columns >> i) & 1;
      const auto power_of_2 = [on_fma](float x) { return on_fma ? fma_exp2(x) : fast_exp2(x); };
      const float p00 = power_of_2(fmaf(s[4 * i + 0], p.scale_log2, neg_base0));
      const float p01 = power_of_2(fmaf(s[4 * i + 1], p.scale_log2, neg_base0));
      const float p10 = power_of_2(fmaf(s[4 * i + 2], p.scale_log2, neg_base1));
      const float p11 = power_of_2(fmaf(s[4 * i + 3], p.scale_log2, neg_base1));
      sum0 += p00 + p01;
      sum1 += p10 + p11;
      // Swizzled address of (row, 8i + col_pair): the 16-byte chunk index is i ^ (row % 8),
      // i.e. the row's base with bits 4..6 flipped by i.
      *reinterpret_cast<__nv_bfloat162*>(p_tile + (p_row0 ^ (i << 4))) = __floats2bfloat162_rn(p00, p01);
      *reinterpret_cast<__nv_bfloat162*>(p_tile + (p_row1 ^ (i << 4))) = __floats2bfloat162_rn(p10, p11);
    }
    l0 = l0 * alpha0 + sum0;  // per-thread partial: its 16 columns of every block
    l1 = l1 * alpha1 + sum1;
    if (lane % 4 == 0) {
      row_scale[r0] = alpha0;
      row_scale[r1] = alpha1;
    }
  }

  __device__ __forceinline__ void read_factors() {
    alpha0 = row_scale[r0];
    alpha1 = row_scale[r1];
  }

  // O (64 x 256) += P (64 x 64) V[:, 256 wg .. 256 wg + 255], 4 k-steps of 16 tokens.
  __device__ __forceinline__ void rescale_and_pv(uint32_t stage_addr) {
    rescale_o(o, alpha0, alpha1);
    const uint64_t v_desc = desc_mn_major(stage_addr + 4 * wg * kBoxBytes);
    wgmma_fence();
    fence_accumulators(o);
#pragma unroll
    for (int k = 0; k < kBlockTokens / 16; ++k) {
      wgmma_pv(desc_advance(p_desc, k * 32), desc_advance(v_desc, k * 2048), o);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(o);
  }

  // Consumer 0 reduces its quads' partial sums and publishes (max, sum).
  __device__ __forceinline__ void publish_stats(float2* stats) { publish_row_stats(stats, lane, r0, r1, m0, m1, l0, l1); }

  __device__ __forceinline__ void write_output(const DecodeParams& p, const Item& it, const float2* stats, bool bad) {
    const float2 st0 = stats[r0], st1 = stats[r1];
    write_item_output(p, it, wg, lane, r0, st0.x, st0.y, bad, o, 0);
    write_item_output(p, it, wg, lane, r1, st1.x, st1.y, bad, o, 2);
  }
};

template <KernelMode Mode, int QkBoxes, bool kSoftmaxOwner>
__device__ __forceinline__ void run_consumer(const DecodeParams& p, uint8_t* smem) {
  TileMath64<QkBoxes, kSoftmaxOwner> tile(smem);
  run_bf16_consumer<Mode, kSoftmaxOwner>(p, smem, tile);
}

}  // namespace kbmla::sm90
