// V transposition of the fp8 kernel: for each KV stage, the V part (dims 0..511 of the 64
// tokens) becomes V^T [512 dims][64 tokens] e4m3 with 64-byte rows and the 64-byte
// swizzle, the K-major B operand of the P V wgmma. Producer warps 2 and 3 write the first
// rows, consumer 1 the rest (kProducerChunks). Tokens at or past the request's seqlen are
// written as zeros (the stage may hold anything there: NaN pages, stale rows), so P = 0
// times V stays 0. See config_fp8.hpp.
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

// V^T rows of the 16-dim chunks [kChunkBegin, kChunkEnd) by kThreadsHere threads. One
// thread's part: token group a (tokens 4a..4a+3) of chunks c0, c0 + kThreadsHere / 16, ...,
// each read as 4 x 16 bytes (one chunk of each token row) and written as 16 words (V^T
// rows 16c..16c+15 at token 4a). Thread tid: a = tid % 16, c0 = kChunkBegin + tid / 16.
// Issue cost is what limits this work (a store moves 4 bytes a lane), hence 16-byte loads
// (4x4-byte units: 282 vs 170 us on uniform_B128_Sq1_H16, the latter also with 72 producer
// registers instead of 56) and one chunk per loop step (more spilled).
// Banks: the 8 lanes of a 16-byte load phase (a = 8h..8h+7, one chunk) read 16-byte group
// (t % 2) 4 + (chunk ^ (t / 2) % 4); lanes with (a / 2) odd load their tokens in the order
// 1, 0, 3, 2 so both parities occur: 2-way instead of 4-way. Stores of a warp: V^T row
// 16c + k at token 4a, bank (k % 2) 16 + 4 ((a / 4) ^ (k / 2) % 4) + a % 4: 16 banks for
// 32 lanes (2-way).
template <int kChunkBegin, int kChunkEnd, int kThreadsHere>
__device__ __forceinline__ void transpose_chunks(const uint8_t* kv, uint8_t* vt, int tid, int valid) {
  const int a = tid % 16, t0 = 4 * a;
  const int rotated = (a >> 1) & 1;
  const int valid_in_group = valid - t0;  // tokens of this group that are real (may be <= 0 or >= 4)
#pragma unroll 1
  for (int c = kChunkBegin + tid / 16; c < kChunkEnd; c += kThreadsHere / 16) {
    const uint8_t* box = kv + (c >> 2) * kBoxBytes;
    uint4 v[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int t = t0 + (i ^ rotated);
      v[i] = *reinterpret_cast<const uint4*>(box + t * 64 + (((c ^ (t >> 1)) & 3) << 4));
    }
    if (rotated) {  // back to token order 0, 1, 2, 3
      const uint4 t = v[0];
      v[0] = v[1];
      v[1] = t;
      const uint4 u = v[2];
      v[2] = v[3];
      v[3] = u;
    }
    if (valid_in_group < 4) {  // the request's last block: tokens past seqlen become 0
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        if (i >= valid_in_group) v[i] = make_uint4(0, 0, 0, 0);
      }
    }
    uint8_t* rows = vt + c * 16 * 64;  // V^T rows 16c..16c+15 (64 bytes each)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint32_t w[4] = {(&v[0].x)[q], (&v[1].x)[q], (&v[2].x)[q], (&v[3].x)[q]};
      uint32_t out[4];
      transpose4x4(w, out);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int k = 4 * q + j;  // rows 16c + k: (row / 2) % 4 = (k / 2) % 4
        *reinterpret_cast<uint32_t*>(rows + k * 64 + ((((t0 >> 4) ^ (k >> 1)) & 3) << 4) + (t0 & 15)) = out[j];
      }
    }
  }
}

// The transposer warps write V^T rows 0..16 kProducerChunks - 1; consumer 1 writes the
// rest while consumer 0 computes S and the softmax (it would otherwise wait for P), so the
// transposer warps, whose issue rate bounded the kernel, carry part of the work. Consumer
// 1's rows are ordered before either PV by the kBarP barrier (each writer fences first);
// consumer 0 waits vt_full for the transposer's. Measured split (uniform_B128_Sq1_H16,
// fp8): 16 chunks 130.9 us, 12 127.0 us, 8 130.8 us (bench/NOTES.md).
#ifndef KBMLA_FP8_PRODUCER_CHUNKS  // experiments only
#define KBMLA_FP8_PRODUCER_CHUNKS 12
#endif
constexpr int kProducerChunks = KBMLA_FP8_PRODUCER_CHUNKS;  // of the 32 16-dim chunks
static_assert(kProducerChunks % 4 == 0 && kProducerChunks >= 4 && kProducerChunks <= 16, "chunk split");

// Walks the same items and blocks as the KV loader; per block: wait for the stage, write
// its V^T rows, fence the writes to the async proxy (wgmma reads them), signal vt_full,
// release the stage (its empty barrier counts the transposer warps too).
__device__ __forceinline__ void run_v_transposer(const DecodeParams& p, uint8_t* smem) {
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  uint64_t* full = bars + 2;
  uint64_t* empty = bars + 2 + kStages;
  uint64_t* vt_full = bars + 2 + 2 * kStages;
  const int tid = threadIdx.x - 64;  // 0..63
  const int lane = threadIdx.x % 32;
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
      transpose_chunks<0, kProducerChunks, kTransposeThreads>(kv, vt, tid, valid);
      fence_view_async_shared();
      Mbarrier::arrive(vt_full + stage);
      release_stage(empty + stage, lane, p.cluster_size);
    }
  });
}

}  // namespace kbmla::sm90::fp8
