// Q of the per-tensor split-role kernel (kernel_fp8_split.cu) from the caller's bf16 Q,
// without a quantiser kernel: the Q loader thread brings each item's bf16 rows by TMA into
// a staging buffer, 32 rows at a time, and the softmax warpgroup, the Q tile's only reader,
// quantises them into the tile once its last S of the previous item completed.
// Why (bench/NOTES.md v34): the quantiser's launch cost 6.5-10 us of each 64-row
// multi-item call (1.5-5 us under graph replay), and quantising from global memory at
// each item's start put four (softmax warpgroup) or two (P V warpgroups) loaded-DRAM round
// trips on the softmax warpgroup's critical path (lognormal_H16_Sq4 +14 %). From shared
// memory a half tile is ~36 loads and 18 stores per thread; the staging buffer takes the
// 36 KiB of a fifth KV stage (four stages measured level, v34), and its first half of the
// next item streams in during the current one.
// The arithmetic is the quantiser's and quantise_q_rows' (scale = max |q| / 448, a zero
// row scale 1, the same reciprocal and saturating conversion): the same e4m3 bytes.
#pragma once

#include "src/sm90/decode/kernel.hpp"
#include "src/sm90/decode/q_inline_fp8.cuh"

namespace kbmla::sm90::fp8 {

constexpr int kStagingRows = kFp8StagedQRows;
constexpr int kStagedParts = kRowsPerCta / kStagingRows;  // stagings per item
// A staged box: [32 rows][64 bf16 = 128 bytes], 128-byte swizzle (the map's), 1024-aligned.
constexpr uint32_t kStagingBoxBytes = kStagingRows * 128;

// The Q loader thread (threadIdx.x 32): both halves of every item's rows, the next item's
// first half as soon as the softmax warpgroup released the buffer. Half h of an item is
// rows 32 h..32 h + 31 of its tile (rows past the tensor read as zeros; rows of the next
// request are read and ignored: quantise_staged_half zeroes rows >= the request's rows).
// Also checks each item's context-parallel positions (as run_q_loader's kCheckDcp).
// After the last part of an item of more than kGateBlocks blocks it arrives on
// q_issued[parity of such items] (the KV loader's gate, which only those items have).
template <int QkBoxes, int kGateBlocks>
__device__ __forceinline__ void run_q_stager(const DecodeParams& p, const QMaps* q_maps, uint8_t* staging,
                                             uint64_t* staging_full, uint64_t* staging_empty, uint64_t* q_issued) {
  int halves = 0, gated_items = 0;
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item</*kSlicedRows=*/true>(p, w);  // (the split-role kernel's)
    if (!it.run) continue;
    if (!p.vis.consistent(it.batch, it.seqlen)) atomicOr(p.error_word, kErrDcpPositions);
    for (int h = 0; h < kStagedParts; ++h, ++halves) {
      Mbarrier::wait(staging_empty, (halves & 1) ^ 1);
      Mbarrier::arrive_and_expect_tx(staging_full, QkBoxes * kStagingBoxBytes);
      const int row = it.batch * p.rows + it.row_begin + kStagingRows * h;
#pragma unroll
      for (int j = 0; j < QkBoxes; ++j) {
        // The latent boxes from q (or q_nope), the rope box from q_pe when Q is given in
        // two tensors, else from q's columns 512..575 (q_pe_col 512).
        const bool rope = j >= kLatentBoxes;
        tma_load_q_box(rope ? &q_maps->rope : &q_maps->latent, staging_full, staging + j * kStagingBoxBytes,
                       rope ? p.q_pe_col + (j - kLatentBoxes) * kBoxCols : j * kBoxCols, row);
      }
    }
    if (it.blk_end - it.blk_begin > kGateBlocks) {
      Mbarrier::arrive(q_issued + (gated_items & 1));
      ++gated_items;
    }
  }
}

// The softmax warpgroup's (tid 0..127) quantisation of staged half h into the Q tile: four
// threads a row (thread t: row t / 4, groups k = t % 4 + 4 i), the row's max |q| over the
// four by two shuffles, then the groups re-read and converted. Rows >= valid (no query)
// become zeros with scale 1, as in quantise_q_rows. Ends with this thread's reads of the
// buffer done and its writes fenced to the async proxy (the caller releases the buffer, and
// syncs the warpgroup before the wgmma reads the tile).
// Why this shape (bench/NOTES.md v38): ncu put the old code's region at ~1,550 executed
// instructions per warp and half, issue-bound (its samples mostly "selected") while the P V
// warpgroups share the SM sub-partitions, 2-2.8 us of each staged half. Here every latent
// address is one of six bases plus an immediate (k's box and chunk follow from i at compile time, given
// part < 4), the maxima are packed bf16 (one instruction per two values; max is exact, so
// the scale is the fmaxf form's bit for bit), and a row without a query skips its loads.
template <int QkBoxes>
__device__ __forceinline__ void quantise_staged_half(const uint8_t* staging, uint8_t* q_tile, float* q_scales, int h,
                                                     int valid, int tid) {
  constexpr int kPerRow = 128 / kStagingRows;  // threads a row
  static_assert(kPerRow == 4, "the address forms below assume four threads a row");
  constexpr int kLatentIters = 16;             // groups 0..63: the four 128-byte latent boxes
  constexpr int kIters = QkBoxes * 8 / kPerRow;  // 18 (d_qk 576: groups 64..71 the rope box) or 16
  constexpr int kBatch = kIters % 6 == 0 ? 6 : 8;  // 24 or 32 registers of loads in flight
  const int r = tid >> 2, part = tid & 3;
  const int t = kStagingRows * h + r;
  const bool real = t < valid;
  // Staged group k = part + 4 i: box i / 2, chunk (part + 4 (i % 2)) ^ r (128-byte swizzle).
  const uint8_t* src[2] = {staging + r * 128 + (((part ^ r) & 7) << 4),
                           staging + r * 128 + ((((part + 4) ^ r) & 7) << 4)};
  // Its latent tile offset: box i / 4, 16-byte chunk (2 (i % 4) + part / 2) ^ t, byte (part % 2) * 8.
  uint8_t* dst[4];
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    dst[c] = q_tile + t * kLatentBoxRowBytes + (((2 * c + (part >> 1)) ^ t) & 7) * 16 + (part & 1) * 8;
  }
  auto staged = [&](int i) { return *reinterpret_cast<const uint4*>(src[i % 2] + (i / 2) * kStagingBoxBytes); };
  // (The rope branch is q_tile_group_offset's with k = part + 4 i, written out: calling the
  // helper re-allocated the softmax warpgroup's whole SASS, v39; not measured, not taken.)
  auto tile_group = [&](int i) {
    return i < kLatentIters ? dst[i % 4] + (i / 4) * kLatentBoxBytes
                            : q_tile + kRopeBoxOffset + swizzled64(t, 8 * (part + 4 * (i - kLatentIters)));
  };
  float amax = 0.f;
  if (real) {
    uint32_t m[4] = {0u, 0u, 0u, 0u};
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const uint4 v = staged(i);
      m[0] = abs_max_bf16x2(m[0], v.x);
      m[1] = abs_max_bf16x2(m[1], v.y);
      m[2] = abs_max_bf16x2(m[2], v.z);
      m[3] = abs_max_bf16x2(m[3], v.w);
    }
    amax = bf16x2_magnitude(abs_max_bf16x2(abs_max_bf16x2(m[0], m[1]), abs_max_bf16x2(m[2], m[3])));
  }
#pragma unroll
  for (int off = 1; off < kPerRow; off *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  const float scale = amax > 0.f ? amax / kE4m3Max : 1.f;
  const float inv = 1.f / scale;
  if (real) {
    // Batches of loads, then their stores: the compiler cannot tell the staging buffer from
    // the tile, so one load per store kept each load behind the store before it (v37).
#pragma unroll
    for (int i0 = 0; i0 < kIters; i0 += kBatch) {
      uint4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) v[j] = staged(i0 + j);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) *reinterpret_cast<uint2*>(tile_group(i0 + j)) = e4m3x8(v[j], inv);
    }
  } else {
#pragma unroll
    for (int i = 0; i < kIters; ++i) *reinterpret_cast<uint2*>(tile_group(i)) = make_uint2(0u, 0u);
  }
  if (part == 0) q_scales[t] = scale;
  fence_view_async_shared();  // wgmma reads the tile through the async proxy
}

}  // namespace kbmla::sm90::fp8
