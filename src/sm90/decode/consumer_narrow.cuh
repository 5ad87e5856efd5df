// The bf16 kernel's consumers for tiles of at most 16 query rows (one-CTA tiles, d_qk 576,
// TMA stages). The 64-row consumers (consumer.cuh) compute S (64 x 64) and O (64 x 512)
// for 64 rows whatever the tile holds; with two 72 KiB stages each stage is held from its
// arrival to both P V products, and that hold time is on the loads' path (bench/NOTES.md
// v40: a re-scheduled softmax alone moved the 16-row split cases 1-2 %; v41: their full
// kernel without the combine ran 5-9 % behind its loads-only spike on B1 and skew_Sq1,
// 2 % on lognormal_H16_Sq1 and B128_Sq1). Here the products are transposed so that
// the 16 rows are the N of the wgmma: S^T = K Q^T (M = 64 tokens, N = 16 rows) and
// O^T = V^T P^T (M = 64 dims per product, N = 16), V^T read from the stage as it is (bf16
// wgmma takes an MN-major A), a quarter of the tensor work per block. Measured (v41): the
// split 16-row cases 3-3.5 % faster, page-64 long items level; for d_qk 512 and two
// loader warps it was 1-3 % slower on long items, so those keep the 64-row consumers.
// Roles as in consumer.cuh: consumer 0 computes S^T, the softmax and P (bf16, [row][token]
// in the P tile, K-major for the B operand), O^T for dims 0..255; consumer 1 O^T for
// 256..511.
// Fragments (wgmma m64n16, fp32): warp w holds M rows 16w + l/4 and + 8 (tokens of S^T,
// dims of O^T), N columns 8i + 2(l%4) + e (query rows) as d[4i + e] (first M row) and
// d[4i + 2 + e] (second), i, e in {0, 1}: each lane has four query rows, the same in
// every warp, and the 32 lanes of one row (8 per warp) reduce it over tokens by shuffles
// and, across the four warps, through shared memory.
#pragma once

#include "src/sm90/decode/consumer.cuh"

namespace kbmla::sm90 {

// kBarNarrowReduce (named_barriers.hpp): consumer 0's four warps' per-row partial maxima
// (or sums) are in the scratch.
// The scratch for those partials: float [4 warps][16 rows], in the P tile past the 16 rows
// of P (2 KiB), which narrow tiles never use.
constexpr uint32_t kNarrowScratchOffset = 4096;

// Row n of a lane's j-th query row (j = 2i + e).
__device__ __forceinline__ int narrow_row(int lane, int j) { return 8 * (j >> 1) + 2 * (lane % 4) + (j & 1); }

// The row's value over the 32 lanes that hold it in each warp (lanes with the same l % 4),
// then over consumer 0's four warps through the scratch; every thread gets the total.
template <bool kMax>
__device__ __forceinline__ void narrow_reduce_rows(float (&v)[4], float* scratch, int warp, int lane) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      const float o = __shfl_xor_sync(0xffffffffu, v[j], off);
      v[j] = kMax ? fmaxf(v[j], o) : v[j] + o;
    }
  }
  if (lane < 4) {
#pragma unroll
    for (int j = 0; j < 4; ++j) scratch[warp * kBf16NarrowRows + narrow_row(lane, j)] = v[j];
  }
  named_sync(kBarNarrowReduce, 128);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int n = narrow_row(lane, j);
    float t = scratch[n];
#pragma unroll
    for (int w = 1; w < 4; ++w) t = kMax ? fmaxf(t, scratch[w * kBf16NarrowRows + n]) : t + scratch[w * kBf16NarrowRows + n];
    v[j] = t;
  }
}

// The epilogue over O^T fragments: dims 256 wg + 64 b + 16 warp + l/4 (d[4i + e]) and + 8
// (d[4i + 2 + e]) of the lane's four rows. The final bf16 output in whole 32-byte sectors:
// lanes l and l ^ 4 (dims j, j ^ 1) swap one value, so that the even one holds dims j, j + 1
// of the first M row and the odd one j - 1, j of the second: 8 lanes, 32 contiguous bytes
// per row and instruction (half sectors cost ~2x, v40). fp32 partials are whole sectors as
// they are.
__device__ __forceinline__ void write_item_output_narrow(const DecodeParams& p, const Item& it, int wg, int warp,
                                                         int lane, const float2 (&st)[4], bool bad,
                                                         const float (&o)[4][8]) {
  const float neg_inf = -__int_as_float(0x7f800000);
  const bool odd = (lane >> 2) & 1;
  const int dim0 = wg * 256 + 16 * warp + lane / 4;
  const bool lse_writer = wg == 0 && warp == 0 && lane < 4;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int row = it.row_begin + narrow_row(lane, j);
    const bool live = row < p.rows;
    const float row_sum = st[j].y;
    const bool empty = bad || !(row_sum > 0.f);
    const float inv = empty ? 0.f : 1.f / row_sum;
    const float lse_log2 = empty ? neg_inf : st[j].x + __log2f(row_sum);
    const int i = j >> 1, e = j & 1;
    if (it.slot < 0) {
      const OutputView& v = p.output;
      __nv_bfloat16* out = static_cast<__nv_bfloat16*>(v.out) +
                           (live ? row_offset(v.out_strides, it.batch, row, v.heads) : 0) + dim0 + (odd ? 7 : 0);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const float v0 = o[b][4 * i + e] * inv, v1 = o[b][4 * i + 2 + e] * inv;
        const float r = __shfl_xor_sync(0xffffffffu, odd ? v0 : v1, 4);
        if (live) {
          *reinterpret_cast<__nv_bfloat162*>(out + 64 * b) =
              odd ? __floats2bfloat162_rn(r, v1) : __floats2bfloat162_rn(v0, r);
        }
      }
      if (live && lse_writer) v.lse[row_offset(v.lse_strides, it.batch, row, v.heads)] = lse_log2 * v.lse_scale;
    } else if (live) {
      float* out = static_cast<float*>(p.partial_o) + (int64_t{it.slot} * p.rows + row) * 512 + dim0;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        out[64 * b] = o[b][4 * i + e] * inv;
        out[64 * b + 8] = o[b][4 * i + 2 + e] * inv;
      }
      if (lse_writer) p.partial_lse[int64_t{it.slot} * p.rows + row] = lse_log2;
    }
  }
}

// The narrow consumers' math (the walk is consumer_loop.cuh's). Consumer 0's rows'
// running maxima (log2 units) and partial sums are m and l; each lane holds four rows.
template <int QkBoxes, bool kSoftmaxOwner>
struct TileMathNarrow {
  static constexpr int wg = kSoftmaxOwner ? 0 : 1;
  int tid, warp, lane, t0;  // t0: the lane's first M row (S^T: token; O^T: dim)
  float* row_scale;         // [16]
  uint8_t* p_tile;
  float* scratch;
  uint64_t q_desc, p_desc;
  float o[4][8];
  float s[8];
  float m[4], l[4], alpha[4], base[4];
  int vis[4];
  int mask_from;

  __device__ __forceinline__ explicit TileMathNarrow(uint8_t* smem) {
    tid = threadIdx.x - 128 * (wg + 1);
    warp = tid / 32;
    lane = tid % 32;
    t0 = warp * 16 + lane / 4;
    row_scale = reinterpret_cast<float*>(smem + SmemLayout::row_scale);
    p_tile = smem + SmemLayout::p;
    scratch = reinterpret_cast<float*>(p_tile + kNarrowScratchOffset);
    q_desc = desc_k_major(smem_addr(smem + SmemLayout::q));
    p_desc = desc_k_major(smem_addr(p_tile));
  }

  __device__ __forceinline__ void begin_item(const DecodeParams& p, const Item& it) {
    mask_from = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int row = it.row_begin + narrow_row(lane, j);
      vis[j] = visible_keys(p, it.batch, it.seqlen, row);
      if (row < p.rows) mask_from = min(mask_from, vis[j]);
    }
    mask_from = __reduce_min_sync(0xffffffffu, mask_from);  // the same rows in every warp
  }

  __device__ __forceinline__ void zero_accumulators() {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int k = 0; k < 8; ++k) o[b][k] = 0.f;
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      m[j] = -__int_as_float(0x7f800000);
      l[j] = 0.f;
    }
  }

  // S^T (64 x 16) = K (64 x d_qk) Q^T, 36 (d_qk 576) or 32 k-steps of 16.
  __device__ __forceinline__ void compute_s(uint32_t stage_addr) {
    const uint64_t k_desc = desc_k_major(stage_addr);
    s_chain<QkBoxes>(s, [&](uint32_t off, bool acc) {
      wgmma_st_narrow(desc_advance(k_desc, off), desc_advance(q_desc, off), s, acc);
    });
  }

  __device__ __forceinline__ void block_factors(const DecodeParams& p, int blk) {
    const float neg_inf = -__int_as_float(0x7f800000);
    const int key0 = blk * kBlockTokens + t0;
    float mx[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int a = 4 * (j >> 1) + (j & 1);  // s[a]: (token t0, row j), s[a + 2]: (t0 + 8, row j)
      if ((blk + 1) * kBlockTokens > mask_from) {
        if (key0 >= vis[j]) s[a] = neg_inf;
        if (key0 + 8 >= vis[j]) s[a + 2] = neg_inf;
      }
      mx[j] = fmaxf(s[a], s[a + 2]);
    }
    narrow_reduce_rows<true>(mx, scratch, warp, lane);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      alpha[j] = lazy_rescale(mx[j] * p.scale_log2, m[j]);
      base[j] = neg_base(m[j]);
    }
  }

  __device__ __forceinline__ void write_p(const DecodeParams& p) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int a = 4 * (j >> 1) + (j & 1), n = narrow_row(lane, j);
      const float p0 = fast_exp2(fmaf(s[a], p.scale_log2, base[j]));
      const float p1 = fast_exp2(fmaf(s[a + 2], p.scale_log2, base[j]));
      l[j] = l[j] * alpha[j] + (p0 + p1);
      *reinterpret_cast<__nv_bfloat16*>(p_tile + swizzled_offset(n, t0)) = __float2bfloat16_rn(p0);
      *reinterpret_cast<__nv_bfloat16*>(p_tile + swizzled_offset(n, t0 + 8)) = __float2bfloat16_rn(p1);
      if (warp == 0 && lane < 4) row_scale[n] = alpha[j];
    }
  }

  __device__ __forceinline__ void read_factors() {
#pragma unroll
    for (int j = 0; j < 4; ++j) alpha[j] = row_scale[narrow_row(lane, j)];
  }

  // O^T (64 dims x 16) += V^T P^T per 64-dim box of this consumer, 4 k-steps of 16 tokens.
  __device__ __forceinline__ void rescale_and_pv(uint32_t stage_addr) {
    if (__any_sync(0xffffffffu, alpha[0] != 1.f || alpha[1] != 1.f || alpha[2] != 1.f || alpha[3] != 1.f)) {
#pragma unroll
      for (int b = 0; b < 4; ++b) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          o[b][4 * (j >> 1) + (j & 1)] *= alpha[j];
          o[b][4 * (j >> 1) + (j & 1) + 2] *= alpha[j];
        }
      }
    }
    wgmma_fence();
#pragma unroll
    for (int b = 0; b < 4; ++b) fence_accumulators(o[b]);
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      const uint64_t v_desc = desc_mn_major(stage_addr + (4 * wg + b) * kBoxBytes);
#pragma unroll
      for (int k = 0; k < kBlockTokens / 16; ++k) {
        wgmma_ot_narrow(desc_advance(v_desc, k * 2048), desc_advance(p_desc, k * 32), o[b]);
      }
    }
    wgmma_commit();
    wgmma_wait<0>();
#pragma unroll
    for (int b = 0; b < 4; ++b) fence_accumulators(o[b]);
  }

  // Consumer 0 sums its rows over tokens and publishes (max, sum).
  __device__ __forceinline__ void publish_stats(float2* stats) {
    narrow_reduce_rows<false>(l, scratch, warp, lane);
    if (warp == 0 && lane < 4) {
#pragma unroll
      for (int j = 0; j < 4; ++j) stats[narrow_row(lane, j)] = make_float2(m[j], l[j]);
    }
  }

  __device__ __forceinline__ void write_output(const DecodeParams& p, const Item& it, const float2* stats, bool bad) {
    float2 st[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) st[j] = stats[narrow_row(lane, j)];
    write_item_output_narrow(p, it, wg, warp, lane, st, bad, o);
  }
};

// kSoftmaxOwner: consumer 0 (S^T, softmax, P, dims 0..255); else consumer 1 (256..511).
template <KernelMode Mode, int QkBoxes, bool kSoftmaxOwner>
__device__ __forceinline__ void run_consumer_narrow(const DecodeParams& p, uint8_t* smem) {
  static_assert(Mode == KernelMode::kFull, "narrow tiles have the full kernel only");
  TileMathNarrow<QkBoxes, kSoftmaxOwner> tile(smem);
  run_bf16_consumer<Mode, kSoftmaxOwner>(p, smem, tile);
}

}  // namespace kbmla::sm90
