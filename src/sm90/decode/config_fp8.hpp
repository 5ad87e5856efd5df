// Compile-time configuration of the sm_90a fp8 MLA decode kernel: the latent cache in
// e4m3 with one fp32 scale for the whole tensor (576 B per token for d_qk 576), Q in
// e4m3 (a bf16 Q quantised per row by the consumers at each item's start,
// q_inline_fp8.cuh, or given so by the caller with one scale), and both products on fp8
// wgmma (e4m3 x e4m3 -> fp32).
//
// fp8 wgmma reads shared-memory operands K-major only. Q, K and P are K-major as they
// come (d, resp. tokens, contiguous); V is not (the cache holds dims contiguous, and P V
// sums over tokens). So P V is computed transposed, O^T (dims x rows) = V^T P^T: V^T is
// the A operand, given in registers, and ldmatrix.trans builds it from the stage as it
// is: each 16-bit element it moves is two dims of one token, so a register holds 2 dims x
// 2 tokens and one byte permute of two such registers makes the 4-token e4m3 groups of
// the A fragment. No transposed copy, no transposer warps (v12-v13 wrote V^T to shared
// memory and were limited by it: 52-61 % of copy; bench/NOTES.md v14).
// The tokens inside each 16-token group are in the order 0,1,8,9, 2,3,10,11, ... in the A
// fragment (what ldmatrix.trans of rows 0-7 and 8-15 gives), and the softmax writes P in
// the same order, so the sum over tokens is unchanged. The dims of an accumulator row are
// permuted too: fragment row x of a warp's 16 is dim 2x (x < 8) or 2(x - 8) + 1, so a lane
// holds two adjacent dims of each output row (consumer_fp8.cuh, epilogue.cuh).
//
// Roles (384 threads, one CTA per SM):
//   warpgroup 0  producer: warp 0 streams the KV stages (TMA; cp.async for one-token
//                pages), thread 32 the Q tiles of a caller's e4m3 Q (a bf16 Q: the consumers quantise it)
//   warpgroups 1, 2  consumers 0 and 1 (one copy of their code, the index at run time,
//                but for 2-CTA clusters): in turn per KV block, S = Q K^T (64 x 64, 18
//                k-steps of 32; S^T = K Q^T, 64 tokens x 16 rows, for tiles of at most
//                16 rows: rows_fp8.cuh), online softmax, P (e4m3) with the per-row factors
//                and maxima to shared memory; each O^T for its 256 dims (consumer_fp8.cuh)
// The latent boxes have 128-byte rows and the 128-byte swizzle, the rope box and P 64-byte
// rows and the 64-byte swizzle (16-byte chunk index XOR bits 7..8 of the address, i.e.
// (row / 2) % 4 for 64-byte rows).
//
// Shared memory (bytes):
//   Q        4 x [64 rows][128 cols] + [64 rows][64 cols] e4m3 = 36,864
//   KV[5]    the same for 64 tokens = 36,864 each; a block's P [64 rows][64 tokens] goes
//            over its stage's rope box once S has read it
//   zero row, barriers, flags, per-stage factors and maxima, row statistics, Q scales
//   ~5.1 KiB                                              = 226,200 bytes (+1 KiB to align).
// Stages: with 36 KiB stages, two kept too few bytes in flight per SM for the bandwidth
// share of one SM (~32 GB/s) at DRAM latency; five measured 5 % faster than four
// (bench/NOTES.md, v14-v17).
#pragma once

#include <cstdint>

#include "src/sm90/decode/config.hpp"

namespace kbmla::sm90::fp8 {

constexpr uint32_t kBoxRowBytes = 64;                              // 64 e4m3 columns
constexpr uint32_t kBoxBytes = kRowsPerCta * kBoxRowBytes;         // 4096
// The per-tensor kernel's Q tile and stages: the 512 latent columns in four boxes of 128
// (128-byte rows, 128-byte swizzle: chunk c of row t at c ^ (t % 8)), then the 64 rope
// columns in one box of 64-byte rows (64-byte swizzle), at the offset of the 64-column box
// 8. 64-byte latent boxes made twice the TMA operations and L2 requests per byte of bf16's
// (v17 ncu: L2 at 86 %; pages of 16 tokens ran 25 % slower than pages of 64).
constexpr uint32_t kLatentBoxRowBytes = 128;
constexpr uint32_t kLatentBoxBytes = kRowsPerCta * kLatentBoxRowBytes;  // 8192
constexpr int kWideLatentBoxes = 4;
constexpr uint32_t kRopeBoxOffset = kWideLatentBoxes * kLatentBoxBytes;  // 32768 = 8 x kBoxBytes
constexpr uint32_t kTileBytes = kQkBoxes * kBoxBytes;              // 36,864 (Q tile or KV stage)
constexpr uint32_t kPBytes = kRowsPerCta * kBlockTokens;           // 4096
// The fp8 kernel's stage count (sm90::kStages is the bf16 kernel's); unqualified kStages
// inside this namespace means this one. Five: the consumers hold up to three stages at a
// time (the block whose S runs, the block whose softmax runs, the other consumer's block
// whose P V waits), so four left one in flight (v14).
constexpr int kStages = 5;
constexpr float kE4m3Max = 448.f;
// P of a block is written into its own stage, over the K rope box (box 8, cols 512..575),
// which S no longer needs once it completed and P V never reads: the P tile lives exactly
// as long as the stage, so no barrier guards its reuse, and the 8 KiB of separate P tiles
// became the fifth stage. With d_qk 512 box 8 is unused.
constexpr uint32_t kPBox = 8;
static_assert(kPBytes == kBoxBytes && kPBox < kQkBoxes, "P fits the rope box of a stage");
static_assert(kPBox * kBoxBytes == kRopeBoxOffset, "the rope box is where the 64-column box 8 was");

// Named barriers of the fp8 consumers (ids 1..3 as in config.hpp; 0 is __syncthreads).
// Per owner consumer c (id + c):
//  kBarFp8StatsReady: the block's row maxima, factors and rescale flag are written (the
//    owner arrives, the other syncs before its own softmax: the serial chain between the
//    consumers ends here, before the owner's exponentials and P stores);
//  p_ready_barrier: the block's P is written (the other syncs before that block's P V).
//    It alternates between two ids by the parity of block_count / 2: the owner may write
//    the P of its next block before the other has synced on this one's;
//  kBarFp8OwnerP: the owner's four warps (128 threads): their flags OR-ed, their P complete.
// kBarFp8QReady: both consumers wrote their rows of the item's Q tile (q_inline_fp8.cuh).
// (The ids: named_barriers.hpp.)

// The layout for a ring of kRing stages (SmemLayout: kStages; the split-role kernel's
// SplitSmemLayout: kSplitStages, consumer_fp8_split.cuh).
template <int kRing>
struct SmemLayoutOf {
  static constexpr uint32_t q = 0;
  static constexpr uint32_t kv = q + kTileBytes;
  // 16 zero bytes: ldmatrix reads them instead of the stage rows of tokens past the
  // request's last token (they may hold anything, NaN included; P is 0 there, 0 x NaN not).
  static constexpr uint32_t zero_row = kv + kRing * kTileBytes;
  static constexpr uint32_t barriers = zero_row + 16;
  // q_full, q_empty, full[kRing], empty[kRing]
  static constexpr uint32_t num_barriers = 2 + 2 * kRing;
  static constexpr uint32_t stage_flags = barriers + 8 * num_barriers;
  // The owner's hand-over of each stage's block: any factor below 1, the factors, the
  // running maxima after the block.
  static constexpr uint32_t rescale_flags = stage_flags + 4 * kRing;      // uint32[stage]
  static constexpr uint32_t row_scale = rescale_flags + 4 * kRing;        // float[stage][64]
  static constexpr uint32_t row_max = row_scale + 4 * kRing * kRowsPerCta;  // float[stage][64]
  static constexpr uint32_t row_stats = row_max + 4 * kRing * kRowsPerCta;  // float2[parity][consumer][64]
  // Per-row Q scales of the item when the consumers quantise Q (q_inline_fp8.cuh).
  static constexpr uint32_t q_scales = row_stats + 8 * 2 * 2 * kRowsPerCta;  // float[64]
  static constexpr uint32_t end = q_scales + 4 * kRowsPerCta;
  static constexpr uint32_t alloc = end + 1024;
  static_assert(kv % 1024 == 0 && kTileBytes % 1024 == 0, "swizzled tiles need 1024-byte alignment");
  static_assert(alloc <= 232448, "over the sm_90 shared-memory limit per CTA");
  static_assert(row_stats % 8 == 0, "row statistics are float2");
  static_assert(barriers % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(row_scale % 8 == 0 && row_max % 8 == 0, "the narrow rows' hand-over is float2 pairs");
};
using SmemLayout = SmemLayoutOf<kStages>;

// The producer runs the KV loader (its one-token gather needs 56: the bf16 gather kernel
// spilled at 40) and the Q loader. A consumer holds O^T (128) and either S of its block
// (32) with the softmax state or the V^T fragments of a block (32).
constexpr int kProducerRegs = 56;
constexpr int kConsumerRegs = 224;
static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= kLaunchRegs * kThreads, "register budget");

}  // namespace kbmla::sm90::fp8
