// Compile-time configuration of the sm_90a fp8 MLA decode kernel: the latent cache in
// e4m3 with one fp32 scale for the whole tensor (576 B per token for d_qk 576), Q
// quantised per row to e4m3 by a small kernel before the decode (quantize_q.cu), and both
// products on fp8 wgmma (e4m3 x e4m3 -> fp32).
//
// fp8 wgmma takes both operands K-major from shared memory. Q, K and P are K-major as
// they come (d, resp. tokens, contiguous); V (B of P V, N = the 512 dims, K = the tokens)
// is not: the cache holds dims contiguous. Each stage's V part is therefore transposed
// into a [512 dims][64 tokens] tile (V^T), by two producer warps and by consumer 1 while
// consumer 0 computes S (transpose_v.cuh); that transposition is what limits the kernel
// (bench/NOTES.md, v12-v13).
//
// Roles (384 threads, one CTA per SM):
//   warpgroup 0  producer: warp 0 streams the KV stages (TMA), thread 32 the Q tiles,
//                warps 2-3 transpose the first V^T rows of each stage, zeroing tail tokens
//   warpgroup 1  consumer 0: S = Q K^T (64 x 64, 18 k-steps of 32), online softmax, P
//                (e4m3) and the per-row rescale factors to shared memory; O columns 0..255
//   warpgroup 2  consumer 1: the other V^T rows (while consumer 0 computes S), then O
//                columns 256..511
// Every tile has 64-byte rows and the 64-byte swizzle (16-byte chunk index XOR bits 7..8
// of the address, i.e. (row / 2) % 4 for 64-byte rows).
//
// Shared memory (bytes):
//   Q        9 x [64 rows][64 cols] e4m3 = 36,864
//   KV[2]    9 x [64 tokens][64 cols]    = 36,864 each
//   V^T[2]   [512 dims][64 tokens]       = 32,768 each
//   P        [64 rows][64 tokens]        =  4,096
//   barriers, flags, row statistics      ~1.1 KiB          = 181,xxx bytes.
#pragma once

#include <cstdint>

#include "src/sm90/decode/config.hpp"

namespace kbmla::sm90::fp8 {

constexpr uint32_t kBoxRowBytes = 64;                              // 64 e4m3 columns
constexpr uint32_t kBoxBytes = kRowsPerCta * kBoxRowBytes;         // 4096
constexpr uint32_t kTileBytes = kQkBoxes * kBoxBytes;              // 36,864 (Q tile or KV stage)
constexpr uint32_t kVtBytes = kDv * kBlockTokens;                  // 32,768
constexpr uint32_t kPBytes = kRowsPerCta * kBlockTokens;           // 4096
constexpr int kTransposeWarps = 2;
// Two KV stages: three (36 KiB each, V^T double-buffered behind its own barriers; f48fa29)
// measured the same (uniform_B128_Sq1_H16 129.8 vs 127.0 us, B64_L32768 460.5 vs 454.2):
// the bytes in flight are not what limits this kernel (bench/NOTES.md, v12).
constexpr int kTransposeThreads = 32 * kTransposeWarps;
constexpr float kE4m3Max = 448.f;

struct SmemLayout {
  static constexpr uint32_t q = 0;
  static constexpr uint32_t kv = q + kTileBytes;
  static constexpr uint32_t vt = kv + kStages * kTileBytes;
  static constexpr uint32_t p = vt + kStages * kVtBytes;
  static constexpr uint32_t barriers = p + kPBytes;
  // q_full, q_empty, full[kStages], empty[kStages], vt_full[kStages]
  static constexpr uint32_t num_barriers = 2 + 3 * kStages;
  static constexpr uint32_t stage_flags = barriers + 8 * num_barriers;
  static constexpr uint32_t row_scale = stage_flags + 4 * kStages;
  static constexpr uint32_t row_stats = row_scale + 4 * kRowsPerCta;
  static constexpr uint32_t end = row_stats + 8 * 2 * kRowsPerCta;
  static constexpr uint32_t alloc = end + 1024;
};
static_assert(SmemLayout::kv % 1024 == 0 && SmemLayout::vt % 1024 == 0 && SmemLayout::p % 1024 == 0,
              "swizzled tiles need 1024-byte alignment");
static_assert(SmemLayout::alloc <= 232448, "over the sm_90 shared-memory limit per CTA");
static_assert(SmemLayout::row_stats % 8 == 0, "row statistics are float2");

// The transposer's loop keeps 16 words of a 4-token x 16-dim unit live on top of the walk:
// it spilled at 56 registers; 72/216 compiles without spills and measured faster than
// 56/224 (uniform_B64_Sq1_H16 fp8 580.9 vs 617.0 us, bench/NOTES.md).
constexpr int kProducerRegs = 72;
constexpr int kConsumerRegs = 216;
static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= kLaunchRegs * kThreads, "register budget");

}  // namespace kbmla::sm90::fp8
