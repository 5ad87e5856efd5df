// Compile-time configuration of the sm_90a bf16 MLA decode kernel (d_qk 576, d_v 512).
//
// Roles (384 threads, one CTA per SM):
//   warpgroup 0  producer: warp 0 streams the KV stages (TMA; cp.async for pages below 8
//                tokens), thread 32 the Q tiles (TMA)
//   warpgroup 1  consumer 0: S = Q K^T of the block (64 x 64), online softmax, P and the
//                per-row rescale factors to shared memory; O columns 0..255
//   warpgroup 2  consumer 1: O columns 256..511 from the shared P and factors
// More than 64 rows (heads x q_len): a 2-CTA cluster per 128-row q tile, each CTA 64
// rows; each producer loads every other KV box with TMA multicast into both CTAs, and a
// stage is refilled once the consumer warps of both CTAs released it, so each KV byte is
// read once per q tile (not once per 64 rows).
// S is computed once, by one warpgroup with N = 64, so Q is read from shared memory once
// per block: 144 KB of operand traffic per block instead of 216 KB when each warpgroup
// computed half of the tokens (each then needed all of Q). Shared-memory bandwidth
// (128 B/clk) was the largest cost of the math loop (bench/NOTES.md, v3).
//
// Shared memory (bytes; every tile 1024-aligned for the 128-byte swizzle):
//   Q        9 x [64 rows][64 cols] bf16 = 73,728   (one 8 KiB box per 64 of d_qk)
//   KV[2]    9 x [64 tokens][64 cols]    = 73,728 each
//   P        [64 rows][64 tokens] bf16   =  8,192
//   barriers, stage flags, row statistics  ~1.1 KiB
// = 230,5xx bytes of the 232,448 an sm_90 CTA may have. Two stages is all that fits with
// a resident Q; deeper pipelines need smaller stages (issue 4 notes).
//
// Registers: a consumer thread holds O 64 x 256 fp32 over 128 threads = 128 registers;
// consumer 0 also S 64 x 64 fp32 = 32 and the row statistics. setmaxnreg gives consumers
// 232 and the producer 40: 128 x 40 + 256 x 232 = 64,512. 56/224 also compiles without
// spills but measured 2-5 % slower on the compute-bound cases (H128, H96, q_len 9;
// bench/NOTES.md, page sizes), so the producer stays at 40: its loop keeps no more than
// one block-table entry and the walk state live, and reads every constant from the
// kernel parameters.
#pragma once

#include <cstdint>

#include "src/sm90/decode/named_barriers.hpp"

namespace kbmla::sm90 {

constexpr int kRowsPerCta = 64;      // wgmma M
constexpr int kBlockTokens = 64;     // KV tokens per stage (the planner's block; pages 1..256 map onto it)
constexpr int kDqk = 576;
constexpr int kDqkNoRope = 512;      // MLA without the rope part: K is the latent (= V)
constexpr int kDv = 512;
constexpr int kBoxCols = 64;         // bf16 columns per 128-byte swizzle atom / TMA box
constexpr int kQkBoxes = kDqk / kBoxCols;  // 9
constexpr int kLatentBoxes = kDqkNoRope / kBoxCols;  // 8: the boxes of the 512 latent columns
constexpr int kStages = 2;
// Tiles of at most this many query rows (one CTA) run the narrow consumers
// (consumer_narrow.cuh; kernel.hpp, bf16_narrow_tile says which).
constexpr int kBf16NarrowRows = 16;
constexpr int kThreads = 384;
constexpr int kConsumerThreads = 256;
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kColsPerConsumer = kDv / 2;             // 256: the N of each consumer's PV wgmma
// Lazy softmax rescaling: the running max moves only when a block's max exceeds it by
// more than this (log2 units); P stays <= 2^8, well inside bf16 and the fp32 sums.
constexpr float kRescaleSlack = 8.f;
#ifndef KBMLA_PRODUCER_REGS  // experiments only: -DKBMLA_PRODUCER_REGS=56 -DKBMLA_CONSUMER_REGS=224
#define KBMLA_PRODUCER_REGS 40
#define KBMLA_CONSUMER_REGS 232
#endif
#ifndef KBMLA_GATHER_BELOW_PAGE  // experiments only
#define KBMLA_GATHER_BELOW_PAGE 8
#endif
// Pages of fewer tokens than this are gathered row by row with cp.async; larger ones come
// as TMA boxes (producer.cuh; bench/NOTES.md has the measurements behind the threshold).
constexpr int kGatherBelowPage = KBMLA_GATHER_BELOW_PAGE;
constexpr int kProducerRegs = KBMLA_PRODUCER_REGS;
constexpr int kConsumerRegs = KBMLA_CONSUMER_REGS;
// The row-gather kernels (small pages) hold more in the producer loop (ptxas spilled
// 68 bytes at 40): they take 56/224, no spill.
constexpr int kGatherProducerRegs = 56;
constexpr int kGatherConsumerRegs = 224;

constexpr uint32_t kBoxBytes = kRowsPerCta * kBoxCols * 2;   // 8192
constexpr uint32_t kTileBytes = kQkBoxes * kBoxBytes;        // 73,728 (Q tile or KV stage)
constexpr uint32_t kPBytes = kRowsPerCta * kBlockTokens * 2; // 8192

struct SmemLayout {
  static constexpr uint32_t q = 0;
  static constexpr uint32_t kv = q + kTileBytes;
  static constexpr uint32_t p = kv + kStages * kTileBytes;
  static constexpr uint32_t barriers = p + kPBytes;  // 8-byte mbarriers
  // q_full, q_empty, full[kStages], empty[kStages]
  static constexpr uint32_t num_barriers = 2 + 2 * kStages;
  static constexpr uint32_t stage_flags = barriers + 8 * num_barriers;   // int32[kStages]
  static constexpr uint32_t row_scale = stage_flags + 4 * kStages;       // float[64]: O rescale of the block
  static constexpr uint32_t row_stats = row_scale + 4 * kRowsPerCta;     // float2[2 parity][64]: (max, sum)
  static constexpr uint32_t end = row_stats + 8 * 2 * kRowsPerCta;
  static constexpr uint32_t alloc = end + 1024;  // slack to align the base to 1024
};
static_assert(SmemLayout::kv % 1024 == 0 && SmemLayout::p % 1024 == 0, "swizzled tiles need 1024-byte alignment");
static_assert(SmemLayout::alloc <= 232448, "over the sm_90 shared-memory limit per CTA");
// setmaxnreg only moves registers between the CTA's warps: the pool is what the launch
// allocated, 168 per thread (65,536 / 384 rounded down to 8), not the SM's 65,536. A split
// over the pool makes setmaxnreg.inc wait forever (measured: 48/232 hung).
constexpr int kLaunchRegs = 168;
static_assert(kProducerRegs * 128 + kConsumerRegs * kConsumerThreads <= kLaunchRegs * kThreads, "register budget");
static_assert(kGatherProducerRegs * 128 + kGatherConsumerRegs * kConsumerThreads <= kLaunchRegs * kThreads,
              "register budget (row gather)");

// Named barriers: named_barriers.hpp.

}  // namespace kbmla::sm90
