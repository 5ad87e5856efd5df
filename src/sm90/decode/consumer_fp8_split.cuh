// The per-tensor fp8 kernel for tiles of 17..64 rows with split consumer roles
// (bench/NOTES.md v32: 7-12 % faster than the alternating consumers on those tiles). One
// softmax warpgroup computes S = Q K^T, the online softmax and P of every block (it alone
// reads Q, and with p.q_staged quantises it from the staging buffer; it holds no O
// accumulators); two P V warpgroups add O^T += V^T P^T for dims 256 pv.. and write the
// output. Per stage, the softmax warpgroup writes P over the stage's rope box, the
// block's factors and rescale flag, fences them to the async proxy and arrives on
// p_full[stage] (count 128); the P V warpgroups wait on it, rescale, run P V and release
// the stage (the empty barrier counts their 8 warps). Per item the row statistics go
// through stats_full / stats_empty[parity] (mbarriers: the softmax warpgroup may run an
// item ahead, which a named barrier would mix up).
// Why: in the alternating kernel (consumer_fp8.cuh) each consumer's S, softmax and P V
// are one serial chain per pair of blocks, joined to the other's by the row-maximum
// hand-over; here the softmax chain has no P V on it and no hand-over.
// Registers (512 threads): producer 48 (TMA loaders only; spills 36 / 28 bytes, 48 / 40
// with two loader warps), softmax 112 (S 32 and the row state; at 88 ptxas serialised the S
// chain), P V 176 (O^T 128 + the V^T fragments of one k-step, 16: at 184 with both k-steps'
// 32 it spilled and serialised the P V wgmma).
#pragma once

#include "src/sm90/decode/consumer_fp8.cuh"
#include "src/sm90/decode/q_staged_fp8.cuh"

namespace kbmla::sm90::fp8 {

constexpr int kSplitThreads = 512;
// Per-item phase timestamps (DecodeArgs::item_timeline, shown by kbmla bench --balance) in
// probe builds only (bench/build_variant.sh NAME -DKBMLA_SPLIT_ITEM_PHASES=1 ...): in the
// wide consumers the timestamps moved ptxas's spills (consumer_fp8.cuh), so the shipped
// kernel carries none. With =2 the end of the blocks is the P V warpgroups' last block
// instead of the softmax warpgroup's last P (the difference is how far P V lags). With =3
// (a staged Q) the phases after the item's start are the staged Q's steps: first half in,
// first half quantised, second half in, Q ready (a later item's "lead" is then the whole
// previous item from its Q ready on).
#ifndef KBMLA_SPLIT_ITEM_PHASES
#define KBMLA_SPLIT_ITEM_PHASES 0
#endif
constexpr int kSplitItemPhases = KBMLA_SPLIT_ITEM_PHASES;
// Four KV stages, not the alternating kernel's five (measured level, bench/NOTES.md v34):
// the fifth one's 36 KiB hold the bf16 Q staging buffer (q_staged_fp8.cuh).
// (-DKBMLA_SPLIT_STAGES=3, a probe build: 0.2-3.9 % slower on the 64-row cases, bench/NOTES.md v57.)
// (Five, in the staging buffer's room, against four without that buffer: 0.2-4.1 % slower on
// the 64-row cases, bench/NOTES.md v63.)
#ifndef KBMLA_SPLIT_STAGES
#define KBMLA_SPLIT_STAGES 4
#endif
constexpr int kSplitStages = KBMLA_SPLIT_STAGES;
// kBarSplitSoftmaxQ (named_barriers.hpp): the softmax warpgroup's four warps wrote the
// item's quantised Q.
constexpr int kSplitProducerRegs = 48;
constexpr int kSplitSoftmaxRegs = 112;
constexpr int kSplitPvRegs = 176;
static_assert(kSplitProducerRegs + kSplitSoftmaxRegs + 2 * kSplitPvRegs == 65536 / 128, "register pool of 512 threads");

// The V^T fragments of one k-step (tokens 32 kb..) for the four M blocks: load_vt_fragments'
// kb-th half.
__device__ __forceinline__ void load_vt_half(int pv, uint32_t stage_addr, uint32_t zero_addr, int warp, int lane,
                                             int valid_tokens, int kb, uint32_t (&a)[4][4]) {
  const bool real = 32 * kb + lane < valid_tokens;
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    const uint32_t addr = stage_addr + (2 * pv + b / 2) * kLatentBoxBytes + (32 * kb + lane) * kLatentBoxRowBytes +
                          ((((4 * (b % 2) + warp) ^ lane) & 7) << 4);
    uint32_t r[4];
    ldmatrix_x4_trans(real ? addr : zero_addr, r);
    a[b][0] = __byte_perm(r[0], r[1], 0x6420);
    a[b][1] = __byte_perm(r[0], r[1], 0x7531);
    a[b][2] = __byte_perm(r[2], r[3], 0x6420);
    a[b][3] = __byte_perm(r[2], r[3], 0x7531);
  }
#pragma unroll
  for (int b = 0; b < 4; ++b) {
#pragma unroll
    for (int j = 0; j < 4; ++j) asm volatile("" : "+r"(a[b][j])::"memory");
  }
}

// One P V k-step of a P V warpgroup: O^T += A P^T, A the k-step's V^T fragments (kb: tokens
// 32 kb..), P at p_desc; waited for before the next k-step's fragments are loaded (both
// k-steps' fragments at once serialised the wgmma, v33). Both split-role kernels.
template <int kAcc>
__device__ __forceinline__ void pv_step(const uint32_t (&a)[4][4], uint64_t p_desc, int kb, float (&o)[4][kAcc]) {
  wgmma_fence();
  fence_accumulators(o);
#pragma unroll
  for (int b = 0; b < 4; ++b) wgmma_pv_fp8_rs(a[b], desc_advance(p_desc, kb * 32), o[b]);
  wgmma_commit();
  wgmma_wait<0>();
  fence_accumulators(o);
}

// The per-tensor split-role kernel's P V of one block: V^T fragments straight from the stage
// (load_vt_half). (The per-block kernel scales them first: consumer_fp8_block_split.cuh.)
template <int kAcc>
__device__ __forceinline__ void pv_block(int pv, uint32_t stage_addr, uint32_t zero_addr, int warp, int lane,
                                         int valid_tokens, uint64_t p_desc, float (&o)[4][kAcc]) {
#pragma unroll
  for (int kb = 0; kb < 2; ++kb) {
    uint32_t a[4][4];
    load_vt_half(pv, stage_addr, zero_addr, warp, lane, valid_tokens, kb, a);
    pv_step(a, p_desc, kb, o);
  }
}

// The split-role kernels' own mbarriers (both formats), after their layout's others:
// p_full[kRing] (the softmax warpgroup's 128 arrivals per block), stats_full[2] (its 128
// per item) and stats_empty[2] (the P V warpgroups' 256), by item parity.
template <int kRing>
struct SplitBarriers {
  static constexpr uint32_t kBytes = 8 * (kRing + 4);
  uint64_t* p_full;
  uint64_t* stats_full;
  uint64_t* stats_empty;
  __device__ __forceinline__ explicit SplitBarriers(uint8_t* at)
      : p_full(reinterpret_cast<uint64_t*>(at)), stats_full(p_full + kRing), stats_empty(p_full + kRing + 2) {}
};

// Their arrival counts, and the layout's q_empty (barriers[1]) at 128: only the softmax
// warpgroup reads Q, so the tile is free after its arrivals.
template <int kRing>
__device__ __forceinline__ void init_split_barriers(uint8_t* split_at, uint64_t* layout_barriers) {
  const SplitBarriers<kRing> b(split_at);
  for (int s = 0; s < kRing; ++s) Mbarrier::init(b.p_full + s, 128);
  Mbarrier::init(b.stats_full + 0, 128);
  Mbarrier::init(b.stats_full + 1, 128);
  Mbarrier::init(b.stats_empty + 0, 2 * 128);
  Mbarrier::init(b.stats_empty + 1, 2 * 128);
  Mbarrier::init(layout_barriers + 1, 128);
  cutlass::arch::fence_barrier_init();
}

struct SplitSmemLayout : SmemLayoutOf<kSplitStages> {
  using Base = SmemLayoutOf<kSplitStages>;
  // The bf16 Q staging buffer: QkBoxes boxes of kStagingBoxBytes (9 x 4 KiB), 1024-aligned
  // for the 128-byte swizzle; staging_full (the Q loader's transaction count) and
  // staging_empty (the softmax warpgroup's 128 arrivals) after it.
  static constexpr uint32_t q_staging = (Base::end + 1023) / 1024 * 1024;
  static constexpr uint32_t staging_barriers = q_staging + kQkBoxes * kStagingBoxBytes;
  static constexpr uint32_t split_barriers = staging_barriers + 16;
  // q_issued[2] (q_staged_fp8.cuh, run_q_stager): the Q loader's arrival once an item's
  // last staged part is issued, by item parity; the KV loader waits for it before the
  // item's later blocks (Fp8SplitSmem::kQGateBlocks).
  static constexpr uint32_t q_issued = split_barriers + SplitBarriers<kSplitStages>::kBytes;
  static constexpr uint32_t split_end = q_issued + 16;
  static constexpr uint32_t alloc = split_end + 1024;
};
static_assert(SplitSmemLayout::alloc <= 232448, "over the sm_90 shared-memory limit per CTA");

// The softmax warpgroup's hand-over of a block to the P V warpgroups (both split-role
// kernels): the block's row factors at [stage][row]; the stage's rescale flag (a uint32
// the P V warpgroups test for non-zero) is one byte per warp, "a factor below 1 in the
// warp's rows", so no barrier across the four warps: each warp's lane 0 writes its byte
// before its arrival on p_full, which the readers wait for (the warpgroup-wide OR of a
// named barrier was ~6 % of the per-block kernel's softmax samples, ncu). Rows: WideRows
// or its per-block form.
template <class Rows>
__device__ __forceinline__ void publish_block_factors(Rows& rows, float* row_scale, volatile uint32_t* rescale_flags,
                                                      int stage, int tid) {
  rows.alpha0 = lazy_rescale(rows.mx0 * rows.f0, rows.m0);
  rows.alpha1 = lazy_rescale(rows.mx1 * rows.f1, rows.m1);
  if (tid % 4 == 0) {
    row_scale[stage * 64 + rows.r0] = rows.alpha0;
    row_scale[stage * 64 + rows.r1] = rows.alpha1;
  }
  const bool rescale = __any_sync(0xffffffffu, rows.alpha0 != 1.f || rows.alpha1 != 1.f);
  if (tid % 32 == 0) reinterpret_cast<volatile uint8_t*>(rescale_flags + stage)[tid / 32] = rescale;
}

// The item's row statistics for the P V warpgroups' epilogue, in the consumer-0 slot of
// row_stats[parity] (the slot-1 sums are zero: one softmax owner).
template <class Rows>
__device__ __forceinline__ void publish_split_stats(Rows& rows, float2* stats, int warp, int lane) {
  rows.publish_stats(0, stats, nullptr, warp, lane);
  if (lane % 4 == 0) {
    stats[kRowsPerCta + rows.r0] = make_float2(rows.m0, 0.f);
    stats[kRowsPerCta + rows.r1] = make_float2(rows.m1, 0.f);
  }
}

// The softmax warpgroup (threads 128..255).
template <KernelMode Mode, int QkBoxes>
__device__ __forceinline__ void run_split_softmax(const DecodeParams& p, uint8_t* smem) {
  const int tid = threadIdx.x - 128, warp = tid / 32, lane = tid % 32;
  using L = SplitSmemLayout;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::barriers);
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  uint64_t* full = bars + 2;
  uint64_t* staging_full = reinterpret_cast<uint64_t*>(smem + L::staging_barriers);
  uint64_t* staging_empty = staging_full + 1;
  const auto [p_full, stats_full, stats_empty] = SplitBarriers<kSplitStages>(smem + L::split_barriers);
  float* row_scale = reinterpret_cast<float*>(smem + L::row_scale);
  volatile uint32_t* rescale_flags = reinterpret_cast<uint32_t*>(smem + L::rescale_flags);
  float2* row_stats = reinterpret_cast<float2*>(smem + L::row_stats);  // [parity][2][64]
  float* q_scales = reinterpret_cast<float*>(smem + L::q_scales);
  const uint32_t q_addr = smem_addr(smem + L::q);
  const uint32_t kv_addr = smem_addr(smem + L::kv);
  const float kv_scale = *p.kv_scale;
  WideRows<QkBoxes> rows(warp, lane);
  int item_count = 0, block_count = 0, staged_halves = 0;
  if (p.timeline != nullptr && tid == 0) record_timeline_start(p);
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item</*kSlicedRows=*/true>(p, w);
    if (!it.run) continue;
    const bool phases = kSplitItemPhases != 0 && p.item_timeline != nullptr && tid == 0;
    if (phases) record_item_phase(p, item_count, 0);
    // (p is in the constant bank: testing p.q_staged costs no register.)
    if (p.q_staged) {
      // Every S of the previous item completed in block_max: the tile is free.
      // (kSplitItemPhases 3: the staged Q's own steps as phases 1..4: first half in, first
      // half quantised, second half in, Q ready.)
      for (int h = 0; h < kStagedParts; ++h, ++staged_halves) {
        Mbarrier::wait(staging_full, staged_halves & 1);
        if (phases && kSplitItemPhases == 3) record_item_phase(p, item_count, 1 + 2 * h);
        quantise_staged_half<QkBoxes>(smem + L::q_staging, smem + L::q, q_scales, h, p.rows - it.row_begin, tid);
        Mbarrier::arrive(staging_empty);
        if (phases && kSplitItemPhases == 3 && h == 0) record_item_phase(p, item_count, 2);
      }
      named_sync(kBarSplitSoftmaxQ, 128);
      rows.begin_item(p, it, kv_scale, QScales{q_scales, 1, kRowsPerCta - 1});
    } else {
      rows.begin_item(p, it, kv_scale, global_q_scales(p, it));
      Mbarrier::wait(q_full, item_count & 1);
    }
    if (phases) record_item_phase(p, item_count, kSplitItemPhases == 3 ? 4 : 1);
    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kSplitStages;
      Mbarrier::wait(full + stage, (block_count / kSplitStages) & 1);
      if (phases && kSplitItemPhases != 3 && blk == it.blk_begin) record_item_phase(p, item_count, 2);
      if constexpr (Mode == KernelMode::kLoadOnly) {
        if (blk + 1 == it.blk_end && !p.q_staged) Mbarrier::arrive(q_empty);
        Mbarrier::arrive(p_full + stage);
        continue;
      }
      const uint32_t stage_addr = kv_addr + stage * kTileBytes;
      rows.block_max(0, q_addr, stage_addr, blk, nullptr);  // S waited for: Q and K read
      if (blk + 1 == it.blk_end && !p.q_staged) Mbarrier::arrive(q_empty);
      publish_block_factors(rows, row_scale, rescale_flags, stage, tid);
      rows.write_p(smem + L::kv + stage * kTileBytes + kPBox * kBoxBytes, warp, lane);
      fence_view_async_shared();
      Mbarrier::arrive(p_full + stage);
    }
    if (it.blk_end == it.blk_begin && !p.q_staged) Mbarrier::arrive(q_empty);  // (no block: Q unread)
    if (phases && kSplitItemPhases == 1) record_item_phase(p, item_count, 3);
    const int par = item_count & 1;
    Mbarrier::wait(stats_empty + par, ((item_count >> 1) & 1) ^ 1);
    publish_split_stats(rows, row_stats + par * 2 * kRowsPerCta, warp, lane);
    Mbarrier::arrive(stats_full + par);
    ++item_count;
  }
}

// A P V warpgroup (pv 0: threads 256..383, dims 0..255; pv 1: 384..511, dims 256..511).
// kAcc: N / 2 accumulators per M block, N the P V product's rows (64, or 48 / 32 for tiles
// of at most that many rows: the padding rows' share of P V is not computed).
template <KernelMode Mode, int QkBoxes, int kAcc = 32>
__device__ __forceinline__ void run_split_pv(const DecodeParams& p, uint8_t* smem, int pv) {
  const int tid = threadIdx.x - 128 * (pv + 2), warp = tid / 32, lane = tid % 32;
  const int col_pair = 2 * (lane % 4);
  using L = SplitSmemLayout;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L::barriers);
  uint64_t* empty = bars + 2 + kSplitStages;
  const auto [p_full, stats_full, stats_empty] = SplitBarriers<kSplitStages>(smem + L::split_barriers);
  const volatile int32_t* stage_flags = reinterpret_cast<int32_t*>(smem + L::stage_flags);
  const volatile uint32_t* rescale_flags = reinterpret_cast<uint32_t*>(smem + L::rescale_flags);
  const float* row_scale = reinterpret_cast<float*>(smem + L::row_scale);
  const float2* row_stats = reinterpret_cast<float2*>(smem + L::row_stats);
  const uint32_t kv_addr = smem_addr(smem + L::kv);
  const uint32_t zero_addr = smem_addr(smem + L::zero_row);
  const float kv_scale = *p.kv_scale;
  int item_count = 0, block_count = 0;
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item</*kSlicedRows=*/true>(p, w);
    if (!it.run) continue;
    float o[4][kAcc];
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int i = 0; i < kAcc; ++i) o[b][i] = 0.f;
    }
    bool bad = false;
    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kSplitStages;
      Mbarrier::wait(p_full + stage, (block_count / kSplitStages) & 1);
      bad |= stage_flags[stage] != 0;
      if constexpr (Mode == KernelMode::kLoadOnly) {
        release_stage(empty + stage, lane, p.cluster_size);
        continue;
      }
      const uint32_t stage_addr = kv_addr + stage * kTileBytes;
      if (rescale_flags[stage] != 0) rescale_ot(o, row_scale + stage * 64, col_pair);
      const uint64_t p_desc = desc_k_major_sw64(stage_addr + kPBox * kBoxBytes);
      pv_block(pv, stage_addr, zero_addr, warp, lane, it.seqlen - blk * kBlockTokens, p_desc, o);
      release_stage(empty + stage, lane, p.cluster_size);
    }
    const bool phases = kSplitItemPhases != 0 && kSplitItemPhases != 3 && pv == 0 && tid == 0 &&
                        p.item_timeline != nullptr;
    if (phases && kSplitItemPhases == 2) record_item_phase(p, item_count, 3);
    const int par = item_count & 1;
    Mbarrier::wait(stats_full + par, (item_count >> 1) & 1);
    write_item_output_transposed(p, it, pv, warp, lane, row_stats + par * 2 * kRowsPerCta, kv_scale, bad, o);
    if (phases) record_item_phase(p, item_count, 4);
    Mbarrier::arrive(stats_empty + par);
    publish_partials</*kSlicedRows=*/true>(p, it, pv * 128 + tid);
    ++item_count;
  }
  // The busy interval ends with the output, as the alternating kernel's does.
  if (pv == 0 && p.timeline != nullptr && tid == 0) record_timeline_end(p, item_count);
}

}  // namespace kbmla::sm90::fp8
