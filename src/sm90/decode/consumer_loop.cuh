// The bf16 kernel's consumer walk, shared by its two tile forms: the 64-row consumers
// (consumer.cuh, TileMath64) and the narrow ones for tiles of at most 16 rows
// (consumer_narrow.cuh, TileMathNarrow). The walk owns what both forms do the same way and
// in the same order: items from the scheduler, the Q tile's hand-back, the stages' full and
// empty barriers, the P hand-over between the consumers (kBarP, kBarPFree), the item's row
// statistics barrier (kBarRowStats), the DCP consistency check and the --balance
// timestamps. The tile form owns the math and the fragment layouts: per item
// begin_item (the rows' visible keys) and zero_accumulators, per block in consumer 0 compute_s, then
// block_factors (masks, maxima, O's factors), then write_p; in consumer 1 read_factors;
// in both rescale_and_pv; per item publish_stats (consumer 0) and write_output.
// Why one walk: the two forms are one protocol with the other consumer and the producer; a
// change to the hand-over in one copy and not the other would deadlock (the named barriers
// count both consumers' threads).
#pragma once

#include "src/sm90/decode/epilogue.cuh"
#include "src/sm90/decode/primitives.cuh"
#include "src/sm90/decode/work.cuh"

namespace kbmla::sm90 {

// --balance instrumentation: this CTA's {start ns, end ns, SM, items}. The start is
// stored when taken (holding it in registers across the loop spilled in the fp8 kernel).
__device__ __forceinline__ int64_t timeline_cta() {
  return int64_t{blockIdx.z} * gridDim.y * gridDim.x + blockIdx.y * gridDim.x + blockIdx.x;
}
__device__ __forceinline__ unsigned long long* timeline_record(const DecodeParams& p) {
  return p.timeline + 4 * timeline_cta();
}
__device__ __forceinline__ void record_timeline_start(const DecodeParams& p) {
  timeline_record(p)[0] = global_timer_ns();
}
__device__ __forceinline__ void record_timeline_end(const DecodeParams& p, int items) {
  unsigned long long* rec = timeline_record(p);
  rec[1] = global_timer_ns();
  rec[2] = sm_id();
  rec[3] = items;
}
// Phase `phase` of this CTA's item `item` (DecodeArgs::item_timeline); the caller tests
// p.item_timeline and picks one thread.
__device__ __forceinline__ void record_item_phase(const DecodeParams& p, int item, int phase) {
  if (item >= kTimelineItems) return;
  p.item_timeline[kItemPhaseSlots * (kTimelineItems * timeline_cta() + item) + phase] = global_timer_ns();
}

// Rows of tokens at or past the request's seqlen may hold anything (NaN in the tests):
// P is 0 there, but 0 x NaN is NaN, so consumer 0 zeroes the V columns (boxes 0..7) of
// those rows once its S of the stage is complete, before either P V reads them.
__device__ __forceinline__ void zero_tail_rows(uint8_t* stage, int first_row, int tid) {
  constexpr int kVBoxes = kDv / kBoxCols;
  const int chunks = (kBlockTokens - first_row) * kVBoxes * 8;  // rows x boxes x 16-byte chunks
  for (int idx = tid; idx < chunks; idx += 128) {
    const int row = first_row + idx / (kVBoxes * 8);
    const int box = (idx / 8) % kVBoxes;
    *reinterpret_cast<uint4*>(stage + box * kBoxBytes + row * 128 + (idx % 8) * 16) = make_uint4(0, 0, 0, 0);
  }
}

// Consumer 0's S chain over a stage's QkBoxes boxes of 64 columns: k-steps of 16 columns
// (32 bytes within a box), step(off, accumulate) issuing the wgmma at byte offset `off` of
// both operands, then one commit and wait. Both tile forms (S = Q K^T, S^T = K Q^T).
template <int QkBoxes, int N, class Step>
__device__ __forceinline__ void s_chain(float (&s)[N], Step&& step) {
  wgmma_fence();
#pragma unroll
  for (int k = 0; k < QkBoxes * kBoxCols / 16; ++k) step((k / 4) * kBoxBytes + (k % 4) * 32, k > 0);
  wgmma_commit();
  wgmma_wait<0>();
  fence_accumulators(s);
}

// One consumer warpgroup's walk. kSoftmaxOwner: consumer 0 (S, the softmax, P, O columns
// 0..255), else consumer 1 (columns 256..511); two instantiations, so that each role's
// wgmma sequence is straight-line code (a role test around wgmma makes ptxas serialise
// them, warning C7520). Tile: TileMath64 or TileMathNarrow, made by the caller.
template <KernelMode Mode, bool kSoftmaxOwner, class Tile>
__device__ __forceinline__ void run_bf16_consumer(const DecodeParams& p, uint8_t* smem, Tile& tile) {
  constexpr int wg = kSoftmaxOwner ? 0 : 1;
  const int tid = threadIdx.x - 128 * (wg + 1);
  const int lane = tid % 32;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  uint64_t* full = bars + 2;
  uint64_t* empty = bars + 2 + kStages;
  const volatile int32_t* stage_flags = reinterpret_cast<int32_t*>(smem + SmemLayout::stage_flags);
  float2* row_stats = reinterpret_cast<float2*>(smem + SmemLayout::row_stats);  // [parity][64]
  const uint32_t kv_addr = smem_addr(smem + SmemLayout::kv);

  int item_count = 0;
  int block_count = 0;
  if (kSoftmaxOwner && p.timeline != nullptr && tid == 0) record_timeline_start(p);
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item(p, w);
    if (!it.run) continue;
    const bool phases = kSoftmaxOwner && p.item_timeline != nullptr && tid == 0;
    if (phases) record_item_phase(p, item_count, 0);
    // Context-parallel positions are checked here, not in resolve_item: the producer's 40
    // registers spilled with it. Inconsistent ones only change which keys are masked.
    if (kSoftmaxOwner && tid == 0 && !p.vis.consistent(it.batch, it.seqlen)) atomicOr(p.error_word, kErrDcpPositions);
    tile.begin_item(p, it);
    if constexpr (kSoftmaxOwner) Mbarrier::wait(q_full, item_count & 1);
    if (phases) record_item_phase(p, item_count, 1);
    tile.zero_accumulators();
    bool bad = false;

    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kStages;
      Mbarrier::wait(full + stage, (block_count / kStages) & 1);
      if (phases && blk == it.blk_begin) record_item_phase(p, item_count, 2);
      bad |= stage_flags[stage] != 0;
      const uint32_t stage_addr = kv_addr + stage * kTileBytes;
      // Only consumer 0's S reads the Q tile: Q is given back after the item's last S, so
      // that the next item's Q load overlaps this block's softmax, P V and the epilogue
      // (it waited for all of them before).
      const bool last_block = blk + 1 == it.blk_end;
      if constexpr (Mode == KernelMode::kLoadOnly) {
        if (last_block) Mbarrier::arrive(q_empty);
        release_stage(empty + stage, lane, p.cluster_size);
        continue;
      }
      if constexpr (kSoftmaxOwner) {
        tile.compute_s(stage_addr);
        if (last_block) Mbarrier::arrive(q_empty);
        tile.block_factors(p, blk);
        const int tail_row = it.seqlen - blk * kBlockTokens;
        if (tail_row < kBlockTokens) zero_tail_rows(smem + SmemLayout::kv + stage * kTileBytes, tail_row, tid);
        // Consumer 1 must be done with the previous block's P and factors.
        if (block_count > 0) named_sync(kBarPFree, kConsumerThreads);
        tile.write_p(p);
        fence_view_async_shared();
        named_sync(kBarP, kConsumerThreads);
      } else {
        if (last_block) Mbarrier::arrive(q_empty);
        named_sync(kBarP, kConsumerThreads);
        tile.read_factors();
      }
      tile.rescale_and_pv(stage_addr);
      if constexpr (!kSoftmaxOwner) named_arrive(kBarPFree, kConsumerThreads);
      release_stage(empty + stage, lane, p.cluster_size);
    }
    if (it.blk_begin == it.blk_end) Mbarrier::arrive(q_empty);  // (no block gave it back)
    if (phases) record_item_phase(p, item_count, 3);
    ++item_count;

    // Row statistics: consumer 0 publishes each row's (max, sum) for both epilogues.
    float2* stats = row_stats + (item_count & 1) * kRowsPerCta;
    if constexpr (kSoftmaxOwner) tile.publish_stats(stats);
    named_sync(kBarRowStats, kConsumerThreads);
    tile.write_output(p, it, stats, bad);
    if (phases) record_item_phase(p, item_count - 1, 4);
    publish_partials(p, it, wg * 128 + tid);
  }
  if (kSoftmaxOwner && p.timeline != nullptr && tid == 0) record_timeline_end(p, item_count);
  // Consume consumer 1's arrival after the last block, so no barrier is left half-done.
  if constexpr (Mode != KernelMode::kLoadOnly) {
    if (kSoftmaxOwner && block_count > 0) named_sync(kBarPFree, kConsumerThreads);
  }
}

}  // namespace kbmla::sm90
