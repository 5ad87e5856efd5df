// Compile-time configuration of the sm_90a decode over the fp8 cache with per-block scales
// (KvDtype::kFp8E4m3PerBlock): each 656-byte token is 512 e4m3 latent values, 4 fp32
// scales (value d = e4m3[d] x scale[d / 128]) and the 64 rope values in bf16
// (reference/fp8_block.hpp). The kernel is the per-tensor fp8 kernel's (config_fp8.hpp:
// two consumers taking the blocks in turn, O^T = V^T P^T with V^T from ldmatrix.trans)
// with three changes:
//  - S = Q K^T sums four e4m3 products, one per 128-dim group g, each times the token's
//    scale_g (an accumulator per group, folded into S in registers), plus the bf16 rope
//    product (wgmma bf16 over the same 128-byte swizzled boxes);
//  - P V of dims in group g takes P times scale_g[token] / M_g: four e4m3 P tiles per
//    block. M_g, the running maximum of group g's scales over the item's blocks, keeps
//    them in e4m3 range; O of the group is rescaled by M_g(old) / M_g(new) when it grows
//    and multiplied by M_g at the end;
//  - a helper warp of the producer warpgroup computes M_g per block (the block's scale
//    maxima), transposes the stage's scales ([group][token], for the fold's 8-byte loads)
//    and writes the P factors scale_g / M_g as half2 pairs (run_scale_helper).
// Each consumer's 256 dims are two groups; the owner of a block writes the two P tiles of
// its own groups to its private buffer (read only by its own P V, right after) and those
// of the other consumer's groups over the stage's rope boxes (S has read them; they live
// as long as the stage, like the per-tensor kernel's P).
//
// Shared memory (bytes):
//   Q        4 e4m3 latent boxes + 1 box of bf16 rope bytes, [64 rows][128 bytes] each
//            (128-byte swizzle, as the per-tensor kernel's latent; v21)            = 40,960
//   KV[4]    5 boxes as Q (64 tokens) + the scales [64 tokens][16 bytes]       = 41,984 each
//   own P    [consumer][2 groups][64 rows][64 tokens] e4m3                    = 16,384
//   zero row, barriers, flags, per-stage factors and P ratios, row statistics ~5.5 KiB = 230,752 (+1 KiB to align)
// Four stages (the per-tensor kernel has five of 36 KiB; 656-byte tokens leave room for four).
// The kernel for at most 16 query rows keeps Q and P at 16 rows and has five stages
// (SmemLayoutT).
#pragma once

#include <cstdint>

#include "src/sm90/decode/config_fp8.hpp"

namespace kbmla::sm90::fp8_block {

constexpr int kGroups = 4;                // scale groups per token
constexpr int kQkBoxes = 10;              // the row's 640 data bytes in 64-byte units (4 + 1 boxes of 128)
constexpr uint32_t kScalesOffset = 512;   // byte offsets in the 656-byte token
constexpr uint32_t kRopeOffset = 528;
constexpr uint32_t kTokenBytes = 656;
constexpr uint32_t kScaleRowBytes = 16;   // 4 fp32 per token
constexpr uint32_t kScalesBytes = kBlockTokens * kScaleRowBytes;                  // 1024
constexpr uint32_t kStageBytes = kQkBoxes * fp8::kBoxBytes + kScalesBytes;        // 41,984
constexpr uint32_t kRopeBox = 8;          // the rope box of a stage at kRopeBox x 4096 = fp8::kRopeBoxOffset
static_assert(kQkBoxes * fp8::kBoxRowBytes + kScaleRowBytes == kTokenBytes, "a stage row is one token");

// Registers: with more than 16 rows a consumer holds O^T (128), S and one group's product
// (64) while it folds S, and the producer warpgroup (loader, Q loader, scale helper) gets
// 40, which spills ~280 bytes there (every spill reduction measured slower, v18). With at
// most 16 rows (kAcc 8: O^T 32, S^T and the four group products 40) the consumers need
// less, and the producer gets 56.
template <int kAcc>
constexpr int kProducerRegs = kAcc == 8 ? 56 : 40;
template <int kAcc>
constexpr int kConsumerRegs = kAcc == 8 ? 224 : 232;
static_assert(kProducerRegs<32> * 128 + kConsumerRegs<32> * kConsumerThreads <= kLaunchRegs * kThreads &&
                  kProducerRegs<8> * 128 + kConsumerRegs<8> * kConsumerThreads <= kLaunchRegs * kThreads,
              "register budget");

// kNarrow: the kernel for tiles of at most 16 query rows (kAcc 8, S^T). Its Q tile and P
// tiles hold 16 rows (the 64-row Q boxes and P tiles of the wide kernel were 3/4 padding),
// which frees the 42 KiB of a fifth stage: with four, the consumers (which hold up to three
// stages: S, softmax, deferred P V) left one in flight, and both sides waited (ncu, v20:
// the consumers ~19 % of their samples on full stages, the loader ~40 % on empty ones).
template <bool kNarrow>
struct SmemLayoutT {
  static constexpr int kStages = kNarrow ? 5 : 4;
  static constexpr uint32_t kQRows = kNarrow ? 16 : kRowsPerCta;  // the host's Q boxes (kFp8BlockNarrowQRows)
  static constexpr uint32_t kQBoxBytes = kQRows * fp8::kBoxRowBytes;  // Q bytes per 64 row bytes: 1024 or 4096
  static constexpr uint32_t kQLatentBoxBytes = kQRows * fp8::kLatentBoxRowBytes;  // a Q box: 2048 or 8192
  static constexpr uint32_t kPBytes = kQRows * kBlockTokens;          // a P tile: 1024 or 4096
  static constexpr uint32_t q = 0;
  static constexpr uint32_t kv = q + kQkBoxes * kQBoxBytes;
  static constexpr uint32_t own_p = kv + kStages * kStageBytes;                      // [consumer][2][kPBytes]
  static constexpr uint32_t zero_row = own_p + 2 * 2 * kPBytes;
  static constexpr uint32_t barriers = zero_row + 16;
  // q_full, q_empty, full[kStages], empty[kStages], ready[kStages] (the helper's factors)
  static constexpr uint32_t num_barriers = 2 + 3 * kStages;
  static constexpr uint32_t stage_flags = barriers + 8 * num_barriers;
  // The owner's hand-over of a block (rescale flag, row factors, row maxima), in slot
  // block_count % 3: block k's is read until the other consumer's P V of k, which precedes
  // its own softmax of k + 3 (the next writer of the slot); the owner's P V of k precedes
  // its softmax of k + 2. Three slots instead of one per stage keep the layout in 227 KiB.
  static constexpr int kHandoverSlots = 3;
  static constexpr uint32_t rescale_flags = stage_flags + 4 * kStages;              // uint32[slot]
  static constexpr uint32_t row_scale = (rescale_flags + 4 * 4 + 7) / 8 * 8;        // float[slot][64]
  static constexpr uint32_t row_max = row_scale + 4 * kHandoverSlots * kRowsPerCta;  // float[slot][64]
  // The helper's per-stage group factors: float4 [stage][3]: M_g after the block, 1 / M_g,
  // M_g(before) / M_g (1 at the item's first block).
  static constexpr uint32_t group_factors = (row_max + 4 * kHandoverSlots * kRowsPerCta + 15) / 16 * 16;
  // The helper's P factors: half2 [stage][group][32 token pairs], scale_g[t] / M_g.
  static constexpr uint32_t p_ratios = group_factors + 16 * 3 * kStages;
  static constexpr uint32_t row_stats = p_ratios + 4 * kGroups * 32 * kStages;      // float2[parity][consumer][64]
  // Per-row Q scales of the item when the consumers quantise Q (q_inline_fp8.cuh): the
  // narrow kernel only (the wide one has 672 bytes left, and always takes the quantiser).
  static constexpr uint32_t q_scales = row_stats + 8 * 2 * 2 * kRowsPerCta;  // float[16]
  static constexpr uint32_t end = q_scales + (kNarrow ? 4 * kQRows : 0);
  static constexpr uint32_t alloc = end + 1024;
  static_assert(kv % 1024 == 0 && kStageBytes % 1024 == 0, "swizzled tiles need 1024-byte alignment");
  static_assert(own_p % 1024 == 0 && kPBytes % 512 == 0, "P tiles are swizzled (512-byte atoms)");
  static_assert(alloc <= 232448, "over the sm_90 shared-memory limit per CTA");
  static_assert(group_factors % 16 == 0 && row_stats % 8 == 0, "float4 / float2 arrays");
  static_assert(barriers % 8 == 0, "mbarriers are 8-byte aligned");
  static_assert(row_scale % 8 == 0 && row_max % 8 == 0, "the narrow rows' hand-over is float2 pairs");
};

}  // namespace kbmla::sm90::fp8_block
