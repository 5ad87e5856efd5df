// Q of the fp8 kernels quantised inside the decode, by their consumers at the start of
// each item: the bf16 rows of the item's tile, per row to e4m3 with scale = max |q| / 448
// (a zero row: scale 1), written into the Q tile as the TMA would (four 128-byte latent
// boxes, 128-byte swizzle; the per-tensor kernel's rope box too, 64-byte swizzle; the
// per-block kernel's bf16 rope box still comes by TMA), the row scales beside it in shared
// memory.
// Why here and not in a kernel of its own (quantize_q.cu, still used where this loses):
// that kernel's launch sat between the call and the decode's start, 4-8 us of every fp8
// call (bench, H200: B128_Sq1 94 -> 90 us and kimi_lognormal 94 -> 86 us with the caller's
// e4m3 Q, which needs no quantiser; bench/NOTES.md v27). Here it costs one or two L2 round
// trips per item, hidden behind the first item's KV stages, not behind later ones'.
// The arithmetic is the quantiser's (same scale, same reciprocal, same saturating
// conversion), so the e4m3 Q and every result are the same bytes as before.
#pragma once

#include <cuda_bf16.h>

#include "src/sm90/decode/rows_fp8.cuh"
#include "src/sm90/decode/work.cuh"

namespace kbmla::sm90::fp8 {

// Byte offset in the Q tile of the 8 e4m3 values of columns 8k..8k+7 of row t: latent
// groups k < 64 in box k / 16 (kBoxBytes apart, 128-byte rows, chunk (k % 16) / 2 XOR
// t % 8), the per-tensor kernel's rope groups in the 64-byte-swizzled box after them.
template <uint32_t kBoxBytes>
__device__ __forceinline__ uint32_t q_tile_group_offset(int t, int k) {
  if (k < 64) {
    return (k >> 4) * kBoxBytes + t * kLatentBoxRowBytes + (((((k >> 1) & 7) ^ t) & 7) << 4) + (k & 1) * 8;
  }
  return kRopeBoxOffset + swizzled64(t, 8 * (k - 64));
}

// The two bf16 halves of a word as floats (exact): the low half shifted up, the high one
// masked. (__bfloat1622float2 made ptxas move the high half down and back up again, 12
// instructions per 8 values instead of 8; bench/NOTES.md v38.)
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

// 8 bf16 (one 16-byte load) times inv, as 8 e4m3 bytes.
__device__ __forceinline__ uint2 e4m3x8(uint4 v, float inv) {
  return make_uint2(e4m3x4(bf16_lo(v.x) * inv, bf16_hi(v.x) * inv, bf16_lo(v.y) * inv, bf16_hi(v.y) * inv),
                    e4m3x4(bf16_lo(v.z) * inv, bf16_hi(v.z) * inv, bf16_lo(v.w) * inv, bf16_hi(v.w) * inv));
}

// max(|a|, |b|) per bf16 half (the result's sign is the XOR of the signs: only its
// magnitude is used); a NaN half yields the other operand's, as fmaxf would. One
// instruction per two values; max is exact, so a row's scale is the float form's bit for bit.
__device__ __forceinline__ uint32_t abs_max_bf16x2(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("max.xorsign.abs.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
  return d;
}

// The largest magnitude of packed bf16 maxima, as a float.
__device__ __forceinline__ float bf16x2_magnitude(uint32_t m) {
  m &= 0x7fff7fffu;
  return fmaxf(bf16_lo(m), bf16_hi(m));
}

__device__ __forceinline__ float abs_max8(uint4 v) {
  return bf16x2_magnitude(abs_max_bf16x2(abs_max_bf16x2(v.x, v.y), abs_max_bf16x2(v.z, v.w)));
}

// The consumers' (256 threads, warp gw = 4 wg + warp; in the per-block split-role kernel
// its two P V warpgroups) quantisation of the item's Q tile (the per-tensor split-role
// kernel stages its Q instead: q_staged_fp8.cuh):
// kRows rows (64, or 16 for the narrow tiles whose S^T reads only those), kRows / 8 per
// warp, the loads of up to four rows in flight at once (12 x 16 bytes per lane); the
// first kGroups 16-byte groups of each row (72: d_qk 576, 64: d_qk 512 or the per-block
// kernel's latent part), latent boxes kBoxBytes apart. Inlined (a call read the
// parameters by generic loads and made its shuffles collective sequences: v27); the
// alternating 2-CTA cluster kernels do not instantiate it (their consumers' registers are
// spoken for), and the host never asks a cluster for it. Rows past the request's rows are
// zeros with scale 1 (their keys are all masked). The caller must have passed the previous
// item's last barrier (every S of it done); this ends with the tile and the scales written
// and fenced to the async proxy, and the 256 threads synced (kBarFp8QReady): their wgmma
// may read it, and one of them may hand it on by an mbarrier arrival.
template <int kGroups, int kRows, uint32_t kBoxBytes>
__device__ __forceinline__ void quantise_q_tile(const DecodeParams& p, const Item& it, uint8_t* q_tile,
                                                float* q_scales, int gw, int lane) {
  constexpr int kRowsPerWarp = kRows / 8;
  constexpr int kBatch = kRowsPerWarp < 4 ? kRowsPerWarp : 4;  // rows whose loads are in flight together
  constexpr int kPerLane = (kGroups + 31) / 32;    // 3 or 2
  const int valid = p.rows - it.row_begin;         // rows of the tile with a query (may be <= 0)
  const __nv_bfloat16* q = static_cast<const __nv_bfloat16*>(p.q_bf16);
  const __nv_bfloat16* q_pe = static_cast<const __nv_bfloat16*>(p.q_pe_bf16);
#pragma unroll 1
  for (int i0 = 0; i0 < kRowsPerWarp; i0 += kBatch) {
    uint4 v[kBatch][kPerLane];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int t = gw * kRowsPerWarp + i0 + i;
      const int64_t row = int64_t{it.batch} * p.rows + it.row_begin + t;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int col = 8 * (lane + 32 * j);
        v[i][j] = make_uint4(0, 0, 0, 0);
        if (t < valid && col < 8 * kGroups) {
          const __nv_bfloat16* src = col < p.q_latent_cols ? q + row * p.q_row + col
                                                           : q_pe + row * p.q_pe_row + (col - p.q_latent_cols);
          v[i][j] = __ldg(reinterpret_cast<const uint4*>(src));
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int t = gw * kRowsPerWarp + i0 + i;
      float amax = 0.f;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) amax = fmaxf(amax, abs_max8(v[i][j]));
#pragma unroll
      for (int off = 16; off > 0; off /= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
      const float scale = amax > 0.f ? amax / kE4m3Max : 1.f;
      const float inv = 1.f / scale;
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int k = lane + 32 * j;
        if (k < kGroups) *reinterpret_cast<uint2*>(q_tile + q_tile_group_offset<kBoxBytes>(t, k)) = e4m3x8(v[i][j], inv);
      }
      if (lane == 0) q_scales[t] = scale;
    }
  }
  // wgmma reads the tile through the async proxy.
  fence_view_async_shared();
  named_sync(kBarFp8QReady, kConsumerThreads);
}

}  // namespace kbmla::sm90::fp8
