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

// 4 x 4 bytes: word j of the result holds byte j of each of the 4 input words (tokens (0,
// 1) and (2, 3) interleaved by byte, then the byte pairs gathered).
__device__ __forceinline__ void transpose4x4(const uint32_t (&w)[4], uint32_t (&out)[4]) {
  const uint32_t lo01 = __byte_perm(w[0], w[1], 0x5140), hi01 = __byte_perm(w[0], w[1], 0x7362);
  const uint32_t lo23 = __byte_perm(w[2], w[3], 0x5140), hi23 = __byte_perm(w[2], w[3], 0x7362);
  out[0] = __byte_perm(lo01, lo23, 0x5410);
  out[1] = __byte_perm(lo01, lo23, 0x7632);
  out[2] = __byte_perm(hi01, hi23, 0x5410);
  out[3] = __byte_perm(hi01, hi23, 0x7632);
}

// One thread's part of a stage: token group a (tokens 4a..4a+3) and word w of every
// 16-byte chunk (dims 16c' + 4w..+3 for all 32 chunks c'), as 32 units of 4 x 4 bytes.
// Thread tid: a = tid / 4, w = tid % 4. Bank use per warp instruction (32 lanes, 4 bytes
// each): loads of token t hit bank (t % 2) 16 + 4 (chunk ^ (t / 2) % 4) + w; lanes with
// (a / 2) odd load their tokens in the order 1, 0, 3, 2, so both token parities occur and
// the 32 lanes meet 16 banks (2-way) instead of 8; stores to V^T row d at token 4a hit
// (d % 2) 16 + 4 ((a / 4) ^ (d / 2) % 4) + a % 4: 16 banks (2-way).
struct TransposeLane {
  int t0, w, rotated;

  __device__ __forceinline__ explicit TransposeLane(int tid) : t0(4 * (tid / 4)), w(tid % 4), rotated((tid / 8) & 1) {}
  // The i-th load's token (order 0, 1, 2, 3 or 1, 0, 3, 2).
  __device__ __forceinline__ int token(int i) const { return t0 + (i ^ rotated); }
};

__device__ __forceinline__ void transpose_stage(const uint8_t* kv, uint8_t* vt, const TransposeLane& lane, int valid) {
#pragma unroll 1
  for (int chunk = 0; chunk < kDv / 16; chunk += 2) {
    const uint8_t* src = kv + (chunk / 4) * kBoxBytes;
    uint8_t* dst = vt + (chunk / 4) * 64 * 64;  // V^T rows 64 box .. 64 box + 63
#pragma unroll
    for (int c = chunk % 4; c < chunk % 4 + 2; ++c) {
      uint32_t w[4], out[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = lane.token(i);
        const uint32_t v = *reinterpret_cast<const uint32_t*>(src + swizzled64(t, 16 * c + 4 * lane.w));
        w[i] = t < valid ? v : 0u;
      }
      if (lane.rotated) {  // back to token order 0, 1, 2, 3
        const uint32_t t0 = w[0], t2 = w[2];
        w[0] = w[1];
        w[1] = t0;
        w[2] = w[3];
        w[3] = t2;
      }
      transpose4x4(w, out);
      // Rows 16 c + d: (d / 2) % 4 is unchanged by + 16 c, so the swizzle of store_off holds.
#pragma unroll
      for (int j = 0; j < 4; ++j) *reinterpret_cast<uint32_t*>(dst + swizzled64(16 * c + 4 * lane.w + j, lane.t0)) = out[j];
    }
  }
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
  const TransposeLane me(tid);
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
      transpose_stage(kv, vt, me, valid);
      fence_view_async_shared();
      Mbarrier::arrive(vt_full + stage);
      release_stage(empty + stage, lane, p.cluster_size);
    }
  });
}

}  // namespace kbmla::sm90::fp8
