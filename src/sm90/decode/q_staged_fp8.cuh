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

// The 16-byte group k (bf16 columns 8k..8k+7) of staged row r.
__device__ __forceinline__ uint4 staged_group(const uint8_t* staging, int r, int k) {
  const int box = k >> 3, chunk = k & 7;
  return *reinterpret_cast<const uint4*>(staging + box * kStagingBoxBytes + r * 128 + (((chunk ^ r) & 7) << 4));
}

// The Q loader thread (threadIdx.x 32): both halves of every item's rows, the next item's
// first half as soon as the softmax warpgroup released the buffer. Half h of an item is
// rows 32 h..32 h + 31 of its tile (rows past the tensor read as zeros; rows of the next
// request are read and ignored: quantise_staged_half zeroes rows >= the request's rows).
// Also checks each item's context-parallel positions (as run_q_loader's kCheckDcp).
// After an item's last part it arrives on q_issued[item parity] (the KV loader's gate).
template <int QkBoxes>
__device__ __forceinline__ void run_q_stager(const DecodeParams& p, const QMaps* q_maps, uint8_t* staging,
                                             uint64_t* staging_full, uint64_t* staging_empty, uint64_t* q_issued) {
  int halves = 0, items = 0;
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item(p, w);
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
    Mbarrier::arrive(q_issued + (items & 1));
    ++items;
  }
}

// The softmax warpgroup's (tid 0..127) quantisation of staged half h into the Q tile: four
// threads a row (thread t: row t / 4, groups t % 4 + 4 i), the row's max |q| over the four
// by two shuffles, then the groups re-read and converted. Rows >= valid (no query) become
// zeros with scale 1, as in quantise_q_rows. Ends with this thread's reads of the buffer
// done and its writes fenced to the async proxy (the caller releases the buffer, and syncs
// the warpgroup before the wgmma reads the tile).
template <int QkBoxes>
__device__ __forceinline__ void quantise_staged_half(const uint8_t* staging, uint8_t* q_tile, float* q_scales, int h,
                                                     int valid, int tid) {
  constexpr int kGroups = QkBoxes * 8;  // 72 (d_qk 576) or 64
  constexpr int kPerRow = 128 / kStagingRows;  // threads a row
  const int r = int(unsigned(tid) / kPerRow), part = int(unsigned(tid) % kPerRow);
  const int t = kStagingRows * h + r;
  const bool real = t < valid;
  float amax = 0.f;
#pragma unroll 6
  for (int k = part; k < kGroups; k += kPerRow) amax = fmaxf(amax, abs_max8(staged_group(staging, r, k)));
#pragma unroll
  for (int off = 1; off < kPerRow; off *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
  if (!real) amax = 0.f;
  const float scale = amax > 0.f ? amax / kE4m3Max : 1.f;
  const float inv = 1.f / scale;
#pragma unroll 6
  for (int k = part; k < kGroups; k += kPerRow) {
    const uint4 v = real ? staged_group(staging, r, k) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint2*>(q_tile + q_tile_group_offset<kLatentBoxBytes>(t, k)) = e4m3x8(v, inv);
  }
  if (part == 0) q_scales[t] = scale;
  fence_view_async_shared();  // wgmma reads the tile through the async proxy
}

}  // namespace kbmla::sm90::fp8
