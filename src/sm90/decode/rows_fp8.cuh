// The per-row half of the fp8 consumers (consumer_fp8.cuh): S of the owner's block, its
// online softmax and its P tile, in one of two shapes picked by the tile's query rows.
//
// WideRows (more than 16 rows): S = Q K^T with the rows as M (64 x 64, m64n64k32), each
//   lane holding rows r0 = 16w + l/4 and r1 = r0 + 8 over 16 tokens (consumer.cuh's
//   fragment layout); the row maxima reduce over a quad.
// NarrowRows (at most 16 rows, one CTA per tile): S^T = K Q^T with the tokens as M and the
//   rows as N (m64n16k32). The wide S spent 4x the tensor work and Q reads on 48 padding
//   rows (the 16-head q_len-1 cases, the commonest decode shape); this one computes 16.
//   Lane l of warp w holds tokens 16w + l/4 (+ 8) of rows n_j = 2(l%4) + (j & 1) + 8(j / 2),
//   j < 4, as s[4i + 2h + e] (token + 8h, row 8i + 2(l%4) + e, j = 2i + e). A row's tokens
//   span all four warps, so its block maximum reduces over the eight lanes l/4 (shuffles)
//   and then the warps (shared memory and the owner's 128-thread barrier); afterwards every
//   warp holds every row's maximum, so the rescale flag is a warp vote, not a barrier.
//   Partial sums stay per lane and reduce once per item.
// Both write P (e4m3) in the token order of the P V A fragment (config_fp8.hpp): in each
// 16-token group, tokens 0,1,8,9, 2,3,10,11, ... at positions 0..15.
#pragma once

#include <cuda_fp8.h>

#include "src/sm90/decode/config_fp8.hpp"
#include "src/sm90/decode/consumer.cuh"

namespace kbmla::sm90::fp8 {

// Byte offset of (row, col) in a tile of 64-byte rows with the 64-byte swizzle: the
// 16-byte chunk index (col / 16) XOR (row / 2) % 4, as TMA writes and wgmma reads it.
__device__ __forceinline__ uint32_t swizzled64(int row, int col) {
  return row * 64 + ((((col >> 4) ^ (row >> 1)) & 3) << 4) + (col & 15);
}

__device__ __forceinline__ uint32_t e4m3x4(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

// Word g of rows r0 and r1 of a 64-row e4m3 P tile for the lane of S column pair col_pair
// (the wide rows' A fragment token order, WideRows::write_p): the lane's tokens
// 16g + col_pair + {0, 1} and 16g + 8 + col_pair + {0, 1}, at positions 16g + 2 col_pair + 0..3.
__device__ __forceinline__ void store_p_words(uint8_t* p_tile, int r0, int r1, int col_pair, int g, uint32_t word0,
                                              uint32_t word1) {
  *reinterpret_cast<uint32_t*>(p_tile + swizzled64(r0, 16 * g + 2 * col_pair)) = word0;
  *reinterpret_cast<uint32_t*>(p_tile + swizzled64(r1, 16 * g + 2 * col_pair)) = word1;
}

// The owner's S of the stage at stage_addr (the per-tensor layout, config_fp8.hpp): 16
// k-steps of 32 over the four 128-byte latent boxes, then (d_qk 576) 2 over the 64-byte rope
// box; one commit group. N = 32 accumulators: S (64 rows x 64 tokens) = Q K^T; N = 8: S^T
// (64 tokens x 16 rows) = K Q^T, the stage as A and the first 16 rows of the Q tile as B
// (both K-major, as the tiles are).
template <int QkBoxes, int N>
__device__ __forceinline__ void issue_s(uint32_t q_addr, uint32_t stage_addr, float (&s)[N]) {
  static_assert(N == 32 || N == 8, "S (rows as M) or S^T (rows as N = 16)");
  auto mma = [&](uint64_t q, uint64_t k, bool accumulate) {
    if constexpr (N == 32) {
      wgmma_qk_fp8(q, k, s, accumulate);
    } else {
      wgmma_kq_fp8(k, q, s, accumulate);
    }
  };
  const uint64_t q_latent = desc_k_major(q_addr), k_latent = desc_k_major(stage_addr);
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < 4 * kWideLatentBoxes; ++k) {
    const uint32_t off = (k / 4) * kLatentBoxBytes + (k % 4) * 32;
    mma(desc_advance(q_latent, off), desc_advance(k_latent, off), k > 0);
  }
  if constexpr (QkBoxes > kLatentBoxes) {
    const uint64_t q_rope = desc_k_major_sw64(q_addr + kRopeBoxOffset);
    const uint64_t k_rope = desc_k_major_sw64(stage_addr + kRopeBoxOffset);
#pragma unroll
    for (int k = 0; k < 2; ++k) mma(desc_advance(q_rope, k * 32), desc_advance(k_rope, k * 32), true);
  }
  wgmma_commit();
}

// The Q scales of an item's tile rows: row r's is base[min(r, last) * stride]. In global
// memory (per row from the quantiser, or the one scale of a caller's e4m3 Q: stride 0;
// rows past the request's rows read a neighbour's, they are never written out), or in
// shared memory beside a Q tile the consumers quantised (q_inline_fp8.cuh).
struct QScales {
  const float* base;
  int stride;
  int last;
  __device__ __forceinline__ float operator()(int r) const { return base[min(r, last) * stride]; }
};
__device__ __forceinline__ QScales global_q_scales(const DecodeParams& p, const Item& it) {
  return {p.q_scale + (int64_t{it.batch} * p.rows + it.row_begin) * p.q_scale_stride, p.q_scale_stride,
          p.rows - 1 - it.row_begin};
}

// Where the owner publishes a block: the per-stage factors, maxima and rescale flag.
struct HandOver {
  float* row_scale;                  // [slot][64]
  float* row_max;                    // [slot][64]
  volatile uint32_t* rescale_flags;  // [slot]
};

template <int QkBoxes>
struct WideRows {
  int r0, r1, col_pair;
  int vis0, vis1, mask_from;
  float f0, f1;        // log2-domain factor of S: softmax scale x kv scale x the row's Q scale
  float m0, m1, l0, l1;
  float mx0, mx1, alpha0, alpha1;
  float s[32];

  __device__ __forceinline__ WideRows(int warp, int lane)
      : r0(warp * 16 + lane / 4), r1(warp * 16 + lane / 4 + 8), col_pair(2 * (lane % 4)) {}

  __device__ __forceinline__ void begin_item(const DecodeParams& p, const Item& it, float kv_scale, QScales qs) {
    vis0 = visible_keys(p, it.batch, it.seqlen, it.row_begin + r0);
    vis1 = visible_keys(p, it.batch, it.seqlen, it.row_begin + r1);
    mask_from = warp_mask_from(p, it, r0, r1, vis0, vis1);
    f0 = p.scale_log2 * kv_scale * qs(r0);
    f1 = p.scale_log2 * kv_scale * qs(r1);
    m0 = m1 = -__int_as_float(0x7f800000);
    l0 = l1 = 0.f;
  }

  // The owner's hand-over of a block: the maxima after the block (this consumer's next
  // softmax starts from them) and, when the owner rescaled, the partial sums times the
  // block's factors.
  __device__ __forceinline__ void take_over(const HandOver& h, int slot, bool rescale) {
    m0 = h.row_max[slot * 64 + r0];
    m1 = h.row_max[slot * 64 + r1];
    if (rescale) {
      l0 *= h.row_scale[slot * 64 + r0];
      l1 *= h.row_scale[slot * 64 + r1];
    }
  }

  // S of the owner's block, masked, and its raw row maxima.
  __device__ __forceinline__ void block_max(int wg, uint32_t q_addr, uint32_t stage_addr, int blk, float*) {
    issue_s<QkBoxes>(q_addr, stage_addr, s);
    wgmma_wait<0>();
    sm90::fence_accumulators(s);
    mask_invisible_keys(s, blk, col_pair, vis0, vis1, mask_from);
    block_row_max(s, mx0, mx1);
  }

  // The new reference maxima (f0, f1 >= 0, so max(s) x f = max(s x f)) and their hand-over,
  // right after the row maxima: the factors and maxima at `slot`, the OR over the four
  // warps of "a factor below 1" as the block's rescale flag (both consumers then rescale O),
  // and the arrival the other consumer's next softmax waits for. Returns the flag.
  __device__ __forceinline__ bool publish(int wg, const HandOver& h, int slot, int tid) {
    alpha0 = lazy_rescale(mx0 * f0, m0);
    alpha1 = lazy_rescale(mx1 * f1, m1);
    if (tid % 4 == 0) {
      h.row_scale[slot * 64 + r0] = alpha0;
      h.row_scale[slot * 64 + r1] = alpha1;
      h.row_max[slot * 64 + r0] = m0;
      h.row_max[slot * 64 + r1] = m1;
    }
    const bool rescale = named_sync_or(kBarFp8OwnerP + wg, 128, alpha0 != 1.f || alpha1 != 1.f);
    if (tid == 0) h.rescale_flags[slot] = rescale;
    named_arrive(kBarFp8StatsReady + wg, kConsumerThreads);
    return rescale;
  }

  // P in the A fragment's token order: the lane's tokens 16g + col_pair + {0, 1}
  // (s[8g + 0..1]) and 16g + 8 + col_pair + {0, 1} (s[8g + 4..5]) are positions
  // 16g + 2 col_pair + 0..3, one 4-byte word per row.
  __device__ __forceinline__ void write_p(uint8_t* p_tile, int, int) {
    const float neg_base0 = neg_base(m0), neg_base1 = neg_base(m1);
    uint32_t p_words0[4], p_words1[4];
    float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      float q0[4], q1[4];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          q0[2 * h + e] = fast_exp2(fmaf(s[8 * g + 4 * h + e], f0, neg_base0));
          q1[2 * h + e] = fast_exp2(fmaf(s[8 * g + 4 * h + 2 + e], f1, neg_base1));
        }
      }
      sum0 += (q0[0] + q0[1]) + (q0[2] + q0[3]);
      sum1 += (q1[0] + q1[1]) + (q1[2] + q1[3]);
      p_words0[g] = e4m3x4(q0[0], q0[1], q0[2], q0[3]);
      p_words1[g] = e4m3x4(q1[0], q1[1], q1[2], q1[3]);
    }
    l0 = l0 * alpha0 + sum0;
    l1 = l1 * alpha1 + sum1;
#pragma unroll
    for (int g = 0; g < 4; ++g) store_p_words(p_tile, r0, r1, col_pair, g, p_words0[g], p_words1[g]);
  }

  // (max, partial sum) of each row for the epilogue, in this consumer's 64 entries.
  __device__ __forceinline__ void publish_stats(int wg, float2* stats, float*, int, int lane) {
    publish_row_stats(stats, lane, r0, r1, m0, m1, l0, l1);
  }
};

// NarrowRows' exchange of per-warp row maxima and sums, float[4 warps][16 rows] per
// consumer: tiles of at most 16 rows publish only rows 0..15 of the row statistics
// (float2 [parity][consumer][64]), so rows 16..63 of parity 0 (384 bytes per consumer)
// are free; the per-block kernel's shared memory has no room for a separate area.
__device__ __forceinline__ float* narrow_row_exchange(float2* row_stats, int consumer) {
  return reinterpret_cast<float*>(row_stats + consumer * kRowsPerCta + 16);
}

template <int QkBoxes>
struct NarrowRows {
  int n0;    // the lane's first row, 2(l%4); its rows are n0, n0 + 1, n0 + 8, n0 + 9
  int odd;   // (l/4) & 1: which of the two lanes of a token pair this is
  int vis[4];
  int mask_from;
  float f[4], m[4], l[4], mx[4], alpha[4];
  float s[8];

  __device__ __forceinline__ static int row(int n0, int j) { return n0 + (j & 1) + 8 * (j >> 1); }

  __device__ __forceinline__ NarrowRows(int, int lane) : n0(2 * (lane % 4)), odd((lane >> 2) & 1) {}

  __device__ __forceinline__ void begin_item(const DecodeParams& p, const Item& it, float kv_scale, QScales qs) {
    const int big = 0x7fffffff;
    int first_masked = big;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int n = row(n0, j);
      vis[j] = visible_keys(p, it.batch, it.seqlen, it.row_begin + n);
      f[j] = p.scale_log2 * kv_scale * qs(n);
      // Padding rows (past heads x q_len) are left out, as in warp_mask_from.
      if (it.row_begin + n < p.rows) first_masked = min(first_masked, vis[j]);
      m[j] = -__int_as_float(0x7f800000);
      l[j] = 0.f;
    }
    mask_from = __reduce_min_sync(0xffffffffu, first_masked);
  }

  __device__ __forceinline__ void take_over(const HandOver& h, int slot, bool rescale) {
    const float* row_max = h.row_max + slot * 64;
    const float2 lo = *reinterpret_cast<const float2*>(row_max + n0);
    const float2 hi = *reinterpret_cast<const float2*>(row_max + n0 + 8);
    m[0] = lo.x, m[1] = lo.y, m[2] = hi.x, m[3] = hi.y;
    if (rescale) {
      const float* scale = h.row_scale + slot * 64;
      const float2 slo = *reinterpret_cast<const float2*>(scale + n0);
      const float2 shi = *reinterpret_cast<const float2*>(scale + n0 + 8);
      l[0] *= slo.x, l[1] *= slo.y, l[2] *= shi.x, l[3] *= shi.y;
    }
  }

  // S^T of the owner's block, masked, and each row's raw maximum over all 64 tokens.
  // `exchange` is this consumer's [4 warps][16 rows] of shared memory; its 128-thread
  // barrier orders the writes before the reads, and the owner's P barrier (every own
  // block passes it) the reads before the next block's writes.
  __device__ __forceinline__ void block_max(int wg, uint32_t q_addr, uint32_t stage_addr, int blk, float* exchange) {
    issue_s<QkBoxes>(q_addr, stage_addr, s);
    wgmma_wait<0>();
    sm90::fence_accumulators(s);
    reduce_block_max(wg, blk, exchange);
  }

  // The mask and the maxima of S^T once it is in s.
  __device__ __forceinline__ void reduce_block_max(int wg, int blk, float* exchange) {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    if ((blk + 1) * kBlockTokens > mask_from) {
      const int key0 = blk * kBlockTokens + 16 * warp + lane / 4;
      const float neg_inf = -__int_as_float(0x7f800000);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          if (key0 + 8 * h >= vis[j]) s[4 * (j >> 1) + 2 * h + (j & 1)] = neg_inf;
        }
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float x = fmaxf(s[4 * (j >> 1) + (j & 1)], s[4 * (j >> 1) + 2 + (j & 1)]);
      x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 4));
      x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 8));
      mx[j] = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 16));
    }
    if (lane < 4) {
      *reinterpret_cast<float2*>(exchange + warp * 16 + n0) = make_float2(mx[0], mx[1]);
      *reinterpret_cast<float2*>(exchange + warp * 16 + n0 + 8) = make_float2(mx[2], mx[3]);
    }
    named_sync(kBarFp8OwnerP + wg, 128);
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 lo = *reinterpret_cast<const float2*>(exchange + w * 16 + n0);
      const float2 hi = *reinterpret_cast<const float2*>(exchange + w * 16 + n0 + 8);
      mx[0] = fmaxf(mx[0], lo.x), mx[1] = fmaxf(mx[1], lo.y);
      mx[2] = fmaxf(mx[2], hi.x), mx[3] = fmaxf(mx[3], hi.y);
    }
  }

  // Every warp holds all 16 rows' maxima now: the factors are the same in every warp, and
  // warp 0's vote is the block's rescale flag.
  __device__ __forceinline__ bool publish(int wg, const HandOver& h, int slot, int tid) {
#pragma unroll
    for (int j = 0; j < 4; ++j) alpha[j] = lazy_rescale(mx[j] * f[j], m[j]);
    if (tid < 4) {
      *reinterpret_cast<float2*>(h.row_scale + slot * 64 + n0) = make_float2(alpha[0], alpha[1]);
      *reinterpret_cast<float2*>(h.row_scale + slot * 64 + n0 + 8) = make_float2(alpha[2], alpha[3]);
      *reinterpret_cast<float2*>(h.row_max + slot * 64 + n0) = make_float2(m[0], m[1]);
      *reinterpret_cast<float2*>(h.row_max + slot * 64 + n0 + 8) = make_float2(m[2], m[3]);
    }
    const bool rescale =
        __any_sync(0xffffffff, alpha[0] != 1.f || alpha[1] != 1.f || alpha[2] != 1.f || alpha[3] != 1.f);
    if (tid == 0) h.rescale_flags[slot] = rescale;
    named_arrive(kBarFp8StatsReady + wg, kConsumerThreads);
    return rescale;
  }

  // P of rows n_j (pv[4i + 2h + e] like s) and the partial sums.
  __device__ __forceinline__ void exponentials(float (&pv)[8]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float base = neg_base(m[j]);
      const int k = 4 * (j >> 1) + (j & 1);
      pv[k] = fast_exp2(fmaf(s[k], f[j], base));
      pv[k + 2] = fast_exp2(fmaf(s[k + 2], f[j], base));
      l[j] = l[j] * alpha[j] + (pv[k] + pv[k + 2]);
    }
  }

  // A P tile (e4m3) from pv (s's layout), each token's values times its factor (t_factor[h]
  // for token t + 8h). The lane's two tokens t (h = 0) and t + 8 (h = 1) of each row go to
  // positions 16w + 2(t & ~1) + (t & 1) and that + 2 (t = l/4), so the lanes of a token pair
  // (l/4 = 2k, 2k + 1: l and l ^ 4) fill one 4-byte word per row: one shuffle swaps the
  // halves, the even lane stores rows n0 and n0 + 8, the odd lane n0 + 1 and n0 + 9.
  template <bool kScaled>
  __device__ __forceinline__ void store_p(uint8_t* p_tile, const float (&pv)[8], float2 t_factor = {}) const {
    const int lane = threadIdx.x % 32, warp = (threadIdx.x / 32) % 4;
    uint32_t pair[4];  // e4m3 of (token t, token t + 8) of row n_j, in the low 16 bits
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int k = 4 * (j >> 1) + (j & 1);
      const float2 x =
          kScaled ? make_float2(pv[k] * t_factor.x, pv[k + 2] * t_factor.y) : make_float2(pv[k], pv[k + 2]);
      pair[j] = __nv_cvt_float2_to_fp8x2(x, __NV_SATFINITE, __NV_E4M3);
    }
    // The even lane keeps rows j = 0, 2 and sends 1, 3; the odd lane the other way round.
    const uint32_t send = odd ? (pair[0] | (pair[2] << 16)) : (pair[1] | (pair[3] << 16));
    const uint32_t recv = __shfl_xor_sync(0xffffffff, send, 4);
    // Bytes: [even t, odd t, even t + 8, odd t + 8].
    const uint32_t word_lo = odd ? __byte_perm(pair[1], recv, 0x1504) : __byte_perm(pair[0], recv, 0x5140);
    const uint32_t word_hi = odd ? __byte_perm(pair[3], recv, 0x1706) : __byte_perm(pair[2], recv, 0x7160);
    const int col = 16 * warp + 2 * ((lane >> 2) & ~1);
    const int n = n0 + odd;
    *reinterpret_cast<uint32_t*>(p_tile + swizzled64(n, col)) = word_lo;
    *reinterpret_cast<uint32_t*>(p_tile + swizzled64(n + 8, col)) = word_hi;
  }

  __device__ __forceinline__ void write_p(uint8_t* p_tile, int, int) {
    float pv[8];
    exponentials(pv);
    store_p<false>(p_tile, pv);
  }

  // The per-lane partial sums reduced over the tokens (lanes l/4, then the warps through
  // `exchange`), and (max, sum) of each row for the epilogue.
  __device__ __forceinline__ void publish_stats(int wg, float2* stats, float* exchange, int warp, int lane) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      l[j] += __shfl_xor_sync(0xffffffff, l[j], 4);
      l[j] += __shfl_xor_sync(0xffffffff, l[j], 8);
      l[j] += __shfl_xor_sync(0xffffffff, l[j], 16);
    }
    if (lane < 4) {
      *reinterpret_cast<float2*>(exchange + warp * 16 + n0) = make_float2(l[0], l[1]);
      *reinterpret_cast<float2*>(exchange + warp * 16 + n0 + 8) = make_float2(l[2], l[3]);
    }
    named_sync(kBarFp8OwnerP + wg, 128);
    if (warp == 0 && lane < 4) {
      float sum[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 lo = *reinterpret_cast<const float2*>(exchange + w * 16 + n0);
        const float2 hi = *reinterpret_cast<const float2*>(exchange + w * 16 + n0 + 8);
        sum[0] += lo.x, sum[1] += lo.y, sum[2] += hi.x, sum[3] += hi.y;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) stats[row(n0, j)] = make_float2(m[j], sum[j]);
    }
  }
};

}  // namespace kbmla::sm90::fp8
