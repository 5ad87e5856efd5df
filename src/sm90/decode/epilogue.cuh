// Epilogue of one work item: the final output (bf16 O / l and natural-log LSE) when the
// request has one split, else partials (O / l and log2 LSE) in its workspace slot: O in
// fp32 from the bf16-cache kernels (write_item_output), in bf16 from the fp8-cache ones
// (write_item_output_transposed; src/combine/combine.hpp, PartialFormat, says why).
// A row with no visible key (sum 0) gets O = 0 and LSE = -inf; an item that met an invalid
// page writes the same (the error word says why).
#pragma once

#include <cuda_bf16.h>

#include "src/sm90/decode/params.hpp"
#include "src/sm90/decode/work.cuh"

namespace kbmla::sm90 {

// `half` selects the fragment's row: 0 for r0 (d[4i+0..1]), 2 for r1 (d[4i+2..3]).
__device__ __forceinline__ void write_item_output(const DecodeParams& p, const Item& it, int wg, int lane,
                                                  int local_row, float row_max_log2, float row_sum, bool bad,
                                                  const float (&o)[128], int half) {
  const int row = it.row_begin + local_row;
  if (row >= p.rows) return;
  const bool empty = bad || !(row_sum > 0.f);
  const float inv = empty ? 0.f : 1.f / row_sum;
  const float neg_inf = -__int_as_float(0x7f800000);
  const float lse_log2 = empty ? neg_inf : row_max_log2 + __log2f(row_sum);
  const int col0 = wg * 256 + 2 * (lane % 4);
  if (it.slot < 0) {
    const OutputView& v = p.output;
    __nv_bfloat16* out = static_cast<__nv_bfloat16*>(v.out) + row_offset(v.out_strides, it.batch, row, v.heads) + col0;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      *reinterpret_cast<__nv_bfloat162*>(out + 8 * i) = __floats2bfloat162_rn(o[4 * i + half] * inv, o[4 * i + half + 1] * inv);
    }
    if (wg == 0 && lane % 4 == 0) v.lse[row_offset(v.lse_strides, it.batch, row, v.heads)] = lse_log2 * v.lse_scale;
  } else {
    float* out = static_cast<float*>(p.partial_o) + (int64_t{it.slot} * p.rows + row) * 512 + col0;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      *reinterpret_cast<float2*>(out + 8 * i) = make_float2(o[4 * i + half] * inv, o[4 * i + half + 1] * inv);
    }
    if (wg == 0 && lane % 4 == 0) p.partial_lse[int64_t{it.slot} * p.rows + row] = lse_log2;
  }
}

// The fp8 kernel's epilogue over O^T fragments (consumer_fp8.cuh): the lane's 16 output
// rows n = 8i + 2(l%4) + e, each with two adjacent dims per 64-dim block b; the row
// statistics come from shared memory, (max, partial sum) of each consumer (stats[n] and
// stats[64 + n]; the maxima agree, the sums add). kv_scale folds the cache's
// dequantisation into 1 / l. kAcc: 32 (64 output rows per tile) or 8 (the first 16).
template <int kAcc>
__device__ __forceinline__ void write_item_output_transposed(const DecodeParams& p, const Item& it, int wg, int warp,
                                                             int lane, const float2* stats, float kv_scale, bool bad,
                                                             const float (&o)[4][kAcc]) {
  const float neg_inf = -__int_as_float(0x7f800000);
  const int dim0 = wg * 256 + 16 * warp + 2 * (lane / 4);
  const bool lse_writer = wg == 0 && warp == 0 && lane < 4;
  const OutputView& v = p.output;
  // A split's rows go to its slot's bf16 partial rows: 512 apart from the item's first.
  // (Only split items, it.slot >= 0, store through it. Forming it per row, or clamping the
  // slot, changed the SASS of 1 / 11 fp8 kernels, the 2-CTA one with 24 more bytes of
  // spills, bench/NOTES.md v36; this form is the measured one.)
  __nv_bfloat16* const partial_rows =
      static_cast<__nv_bfloat16*>(p.partial_o) + (int64_t{it.slot} * p.rows + it.row_begin) * 512 + dim0;
#pragma unroll
  for (int i = 0; i < kAcc / 4; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int n = 8 * i + 2 * (lane % 4) + e;
      const int row = it.row_begin + n;
      if (row >= p.rows) continue;
      const float row_max = stats[n].x, row_sum = stats[n].y + stats[kRowsPerCta + n].y;
      const bool empty = bad || !(row_sum > 0.f);
      const float inv = empty ? 0.f : kv_scale / row_sum;
      const float lse_log2 = empty ? neg_inf : row_max + __log2f(row_sum);
      __nv_bfloat16* out = it.slot < 0 ? static_cast<__nv_bfloat16*>(v.out) +
                                             row_offset(v.out_strides, it.batch, row, v.heads) + dim0
                                       : partial_rows + n * 512;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        *reinterpret_cast<__nv_bfloat162*>(out + 64 * b) =
            __floats2bfloat162_rn(o[b][4 * i + e] * inv, o[b][4 * i + 2 + e] * inv);
      }
      if (lse_writer) {
        if (it.slot < 0) {
          v.lse[row_offset(v.lse_strides, it.batch, row, v.heads)] = lse_log2 * v.lse_scale;
        } else {
          p.partial_lse[int64_t{it.slot} * p.rows + row] = lse_log2;
        }
      }
    }
  }
}

}  // namespace kbmla::sm90
