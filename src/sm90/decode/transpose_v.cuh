// V transposer of the fp8 kernel (producer warps 2 and 3): for each KV stage, writes the
// V part (dims 0..511 of the 64 tokens) as V^T [512 dims][64 tokens] e4m3 with 64-byte
// rows and the 64-byte swizzle, the K-major B operand of the P V wgmma. Tokens at or past
// the request's seqlen are written as zeros (the stage may hold anything there: NaN
// pages, stale rows), so P = 0 times V stays 0. See config_fp8.hpp.
#pragma once

#include "src/sm90/decode/config_fp8.hpp"
#include "src/sm90/decode/primitives.cuh"
#include "src/sm90/decode/work.cuh"

namespace kbmla::sm90::fp8 {

// Byte offset of (row, col) in a tile of 64-byte rows with the 64-byte swizzle: the
// 16-byte chunk index (col / 16) XOR (row / 2) % 4, as TMA writes and wgmma reads it.
__device__ __forceinline__ uint32_t swizzled64(int row, int col) {
  return row * 64 + ((((col >> 4) ^ (row >> 1)) & 3) << 4) + (col & 15);
}

// One unit: 4 tokens (t0..t0+3) x 4 dims (d0..d0+3, one word of each token row), transposed
// with byte permutes into 4 words (one per dim, its 4 tokens) at V^T rows d0..d0+3.
// `valid` tokens of the block are real; the others become zeros.
__device__ __forceinline__ void transpose_unit(const uint8_t* stage, uint8_t* vt, int t0, int d0, int valid) {
  const uint8_t* box = stage + (d0 >> 6) * kBoxBytes;
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = *reinterpret_cast<const uint32_t*>(box + swizzled64(t0 + i, d0 & 63));
    w[i] = t0 + i < valid ? v : 0u;
  }
  // Tokens (0, 1) and (2, 3) interleaved by byte, then the byte pairs gathered: word j
  // holds byte j (dim d0 + j) of the 4 tokens.
  const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
  const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
  *reinterpret_cast<uint32_t*>(vt + swizzled64(d0 + 0, t0)) = __byte_perm(lo01, lo23, 0x5410);
  *reinterpret_cast<uint32_t*>(vt + swizzled64(d0 + 1, t0)) = __byte_perm(lo01, lo23, 0x7632);
  *reinterpret_cast<uint32_t*>(vt + swizzled64(d0 + 2, t0)) = __byte_perm(hi01, hi23, 0x5410);
  *reinterpret_cast<uint32_t*>(vt + swizzled64(d0 + 3, t0)) = __byte_perm(hi01, hi23, 0x7632);
}

// Walks the same items and blocks as the KV loader; per block: wait for the stage, write
// V^T, fence the writes to the async proxy (wgmma reads them), signal vt_full, release the
// stage (its empty barrier counts the transposer warps too).
__device__ __forceinline__ void run_v_transposer(const DecodeParams& p, uint8_t* smem) {
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  uint64_t* full = bars + 2;
  uint64_t* empty = bars + 2 + kStages;
  uint64_t* vt_full = bars + 2 + 2 * kStages;
  const int tid = threadIdx.x - 64;  // 0..63
  const int lane = threadIdx.x % 32;
  // 2048 units per block (16 token groups x 128 dim groups), 32 per thread; a thread keeps
  // its token group, lanes 0..15 and 16..31 take the 16 groups of two dim groups.
  const int t0 = 4 * (tid % 16);
  const int group0 = tid / 16;  // 0..3, then + 4 per step
  int block_count = 0;
  for_each_work_tile(p, [&](const WorkTileInfo& w) {
    const Item it = resolve_item(p, w);
    if (!it.run) return;
    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kStages;
      Mbarrier::wait(full + stage, (block_count / kStages) & 1);
      const int valid = min(kBlockTokens, it.seqlen - blk * kBlockTokens);
      const uint8_t* kv = smem + SmemLayout::kv + stage * kTileBytes;
      uint8_t* vt = smem + SmemLayout::vt + stage * kVtBytes;
#pragma unroll 1
      for (int g = group0; g < kDv / 4; g += 4) transpose_unit(kv, vt, t0, 4 * g, valid);
      fence_view_async_shared();
      Mbarrier::arrive(vt_full + stage);
      release_stage(empty + stage, lane, p.cluster_size);
    }
  });
}

}  // namespace kbmla::sm90::fp8
