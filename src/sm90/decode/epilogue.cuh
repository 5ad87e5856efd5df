// Epilogue of one work item: the final output (bf16 O / l and natural-log LSE) when the
// request has one split, else partials (O / l and log2 LSE) in its workspace slot: O in
// fp32 from the bf16-cache kernels (write_item_output), in bf16 from the fp8-cache ones
// (write_item_output_transposed; src/combine/combine.hpp, PartialFormat, says why).
// A row with no visible key (sum 0) gets O = 0 and LSE = -inf; an item that met an invalid
// page writes the same (the error word says why).
#pragma once

#include <cuda_bf16.h>

#include "src/sm90/decode/params.hpp"
#include "src/sm90/decode/primitives.cuh"
#include "src/sm90/decode/work.cuh"

namespace kbmla::sm90 {

__device__ __forceinline__ uint32_t bf162_bits(float lo, float hi) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

// `half` selects the fragment's row: 0 for r0 (d[4i+0..1]), 2 for r1 (d[4i+2..3]).
__device__ __forceinline__ void write_item_output(const DecodeParams& p, const Item& it, int wg, int lane,
                                                  int local_row, float row_max_log2, float row_sum, bool bad,
                                                  const float (&o)[128], int half) {
  const int row = it.row_begin + local_row;
  // (No early return for rows past the request's: the final output's quad shuffles below
  // need every lane of the warp; a quad shares its row, so it stores all or nothing.)
  const bool live = row < p.rows;
  const bool empty = bad || !(row_sum > 0.f);
  const float inv = empty ? 0.f : 1.f / row_sum;
  const float neg_inf = -__int_as_float(0x7f800000);
  const float lse_log2 = empty ? neg_inf : row_max_log2 + __log2f(row_sum);
  const int col0 = wg * 256 + 2 * (lane % 4);
  if (it.slot < 0) {
    // bf16 rows in whole 32-byte sectors: a quad holds columns 8i + 2q, +1 of its row for
    // every i, and storing them as they are wrote half a sector per row and instruction.
    // 64-row items then took 6.0-6.5 us from their last block to the written output, more
    // than the fp32 partials' 3.3-3.9 us (twice the bytes, in whole sectors); now 1.9-2.0
    // (bench/NOTES.md v40). Two shuffles per pair of i give lane q the columns
    // 8i + 4q .. 8i + 4q + 3, one 8-byte store: the quad writes 32 contiguous bytes.
    // Round A: lane q sends (q odd ? the i + 1 word : the i word) to lane 2(q % 2) + q / 2;
    // round B the other word to the partner lane; lanes 2 and 3 receive theirs swapped.
    // (This code re-scheduled consumer 0's softmax in ptxas, whatever its form: the 16-row
    // split cases measured ~1-2 % slower, v40; prefetching the rows into L2 instead left
    // the output phase at 5.7 us.)
    const OutputView& v = p.output;
    const int q = lane % 4;
    const int src_a = (lane & ~3) | ((q & 1) << 1) | (q >> 1);
    __nv_bfloat16* out =
        static_cast<__nv_bfloat16*>(v.out) + row_offset(v.out_strides, it.batch, row, v.heads) + wg * 256 + 4 * q;
#pragma unroll
    for (int i = 0; i < 32; i += 2) {
      const uint32_t w0 = bf162_bits(o[4 * i + half] * inv, o[4 * i + half + 1] * inv);
      const uint32_t w1 = bf162_bits(o[4 * i + 4 + half] * inv, o[4 * i + 4 + half + 1] * inv);
      const uint32_t x = __shfl_sync(0xffffffffu, q & 1 ? w1 : w0, src_a);
      const uint32_t y = __shfl_sync(0xffffffffu, q & 1 ? w0 : w1, src_a ^ 1);
      if (live) *reinterpret_cast<uint2*>(out + 8 * i) = q >= 2 ? make_uint2(y, x) : make_uint2(x, y);
    }
    if (live && wg == 0 && lane % 4 == 0) {
      v.lse[row_offset(v.lse_strides, it.batch, row, v.heads)] = lse_log2 * v.lse_scale;
    }
  } else if (live) {
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
// Why this shape (bench/NOTES.md v38): it is straight-line code run once per item by the P
// V warpgroups, and its length is the item's tail: the form with an IEEE division per row
// (a slow-path call each), the output / partial choice and the row bound tested per row was
// ~2,240 instructions per warp, 4-5 us from the last P to the written output. The
// approximate reciprocal (rcp.approx, within 1 ulp over the whole float range: ptxas scales
// subnormal and huge sums around it) is far below bf16's rounding of the result; the
// destination is chosen once per item.
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <int kAcc>
__device__ __forceinline__ void write_item_output_transposed(const DecodeParams& p, const Item& it, int wg, int warp,
                                                             int lane, const float2* stats, float kv_scale, bool bad,
                                                             const float (&o)[4][kAcc]) {
  const float neg_inf = -__int_as_float(0x7f800000);
  const int dim0 = wg * 256 + 16 * warp + 2 * (lane / 4);
  const bool lse_writer = wg == 0 && warp == 0 && lane < 4;
  // The tile's rows n < valid_rows exist. (A CTA writes rows n < 2 kAcc: with the 48-row
  // slices of a 2-CTA tile, kernel.hpp cluster_cta_rows, N = 2 kAcc is 48, so the first
  // slice stops at its end.)
  const int valid_rows = p.rows - it.row_begin;
  // Calls write(n, inv, lse_log2, i, e) for each of the lane's rows n that exist, with row
  // n's 1 / l (times kv_scale) and log2 LSE; an empty row (no visible key, or an item that
  // met an invalid page) gets O = 0 and LSE = -inf.
  auto for_each_row = [&](auto&& write) {
#pragma unroll
    for (int i = 0; i < kAcc / 4; ++i) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int n = 8 * i + 2 * (lane % 4) + e;
        if (n >= valid_rows) continue;
        const float row_max = stats[n].x, row_sum = stats[n].y + stats[kRowsPerCta + n].y;
        const bool empty = bad || !(row_sum > 0.f);
        write(n, empty ? 0.f : kv_scale * rcp_approx(row_sum), empty ? neg_inf : row_max + __log2f(row_sum), i, e);
      }
    }
  };
  auto store_row = [&](__nv_bfloat16* out, int i, int e, float inv) {
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      *reinterpret_cast<__nv_bfloat162*>(out + 64 * b) =
          __floats2bfloat162_rn(o[b][4 * i + e] * inv, o[b][4 * i + 2 + e] * inv);
    }
  };
  if (it.slot < 0) {
    const OutputView& v = p.output;
    for_each_row([&](int n, float inv, float lse_log2, int i, int e) {
      const int row = it.row_begin + n;
      store_row(static_cast<__nv_bfloat16*>(v.out) + row_offset(v.out_strides, it.batch, row, v.heads) + dim0, i, e,
                inv);
      if (lse_writer) v.lse[row_offset(v.lse_strides, it.batch, row, v.heads)] = lse_log2 * v.lse_scale;
    });
  } else {
    // A split's rows go to its slot's bf16 partial rows, 512 apart, and its LSEs beside them.
    // (Forming the partial row address per row, or clamping the slot, changed the SASS of
    // 1 / 11 fp8 kernels, the 2-CTA one with 24 more bytes of spills, bench/NOTES.md v36.)
    __nv_bfloat16* const partial_rows =
        static_cast<__nv_bfloat16*>(p.partial_o) + (int64_t{it.slot} * p.rows + it.row_begin) * 512 + dim0;
    float* const partial_lse = p.partial_lse + int64_t{it.slot} * p.rows + it.row_begin;
    for_each_row([&](int n, float inv, float lse_log2, int i, int e) {
      store_row(partial_rows + n * 512, i, e, inv);
      if (lse_writer) partial_lse[n] = lse_log2;
    });
  }
}

// The barrier of an item's writers after its partials (kBarPartialsWritten,
// named_barriers.hpp: an id no kernel uses for anything else): in every decode kernel the
// two warpgroups that write the output (the bf16 consumers, the fp8 consumers or P V
// warpgroups), 256 threads.
constexpr uint32_t kPartialWriterThreads = 256;

// Called by each of the 256 writers (`writer` 0..255) after its share of the item's
// output. For a split item with early merges on, writer 0 then makes every writer's
// partial stores visible at GPU scope (bar.sync orders them before its fence) and sets the
// piece's flag (work_format.hpp, CombineSync), so that the combine merges the request
// without waiting for this grid's end. Only writer 0's warp waits for the fence (its
// latency not timed alone); it is at an item boundary, where the writers wait for the next
// item's Q and first stage.
// kSlicedRows: the item was resolved with resolve_item<true> (rows in p.cta_rows slices).
template <bool kSlicedRows = false>
__device__ __forceinline__ void publish_partials(const DecodeParams& p, const Item& it, int writer) {
  if (p.piece_flags == nullptr || it.slot < 0) return;
  named_sync(kBarPartialsWritten, kPartialWriterThreads);
  if (writer == 0) {
    unsigned long long epoch;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(epoch) : "l"(&p.combine_sync->epoch) : "memory");
    const int piece = kSlicedRows ? piece_of_row(it.row_begin, p.cta_rows) : it.row_begin / 64;
    unsigned long long* flag = p.piece_flags + int64_t{it.slot} * p.piece_row_groups + piece;
    asm volatile("fence.acq_rel.gpu;" ::: "memory");
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(flag), "l"(piece_flag(epoch)) : "memory");
  }
}

}  // namespace kbmla::sm90
