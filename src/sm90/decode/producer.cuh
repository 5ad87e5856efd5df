// Producer role: two threads of the producer warpgroup walk the same items as the
// consumers; one keeps the KV stage ring fed by TMA, the other loads each item's Q tile.
// PagedKvLoader64 is the extension point for other page sizes and dtypes (issue 5): it
// maps (request, KV block) to TMA boxes and flags blocks it cannot load.
#pragma once

#include "src/sm90/decode/kernel.hpp"
#include "src/sm90/decode/primitives.cuh"
#include "src/sm90/decode/work.cuh"

namespace kbmla::sm90 {

// Page-size-64 bf16 loader: one KV block is one page, QkBoxes 64 x 64 boxes (9 for d_qk
// 576, 8 for d_qk 512; the stage buffer always has room for 9).
template <int QkBoxes>
struct PagedKvLoader64 {
  const CUtensorMap* map;
  const int32_t* block_table;
  int max_pages;
  int64_t num_pages;

  // The page of a block, with its error bits (0 when the index is valid). An invalid page
  // is replaced by page 0 so the TMA stays in bounds; the consumers see the stage flag
  // and write zeros for the item.
  __device__ __forceinline__ uint32_t page_of(int batch, int block, int32_t& page) const {
    page = block_table[int64_t{batch} * max_pages + block];
    if (page >= 0 && page < num_pages) return 0;
    page = 0;
    return kErrPageIndexOutOfRange;
  }

  // Every CTA of the cluster expects the whole stage; in a 2-CTA cluster each producer
  // issues every other box, multicast to both, so each KV byte leaves L2 once per q tile.
  __device__ __forceinline__ void issue(int32_t page, uint64_t* bar, uint8_t* stage, int cluster_size,
                                        int rank) const {
    Mbarrier::arrive_and_expect_tx(bar, QkBoxes * kBoxBytes);
    if (cluster_size == 1) {
#pragma unroll
      for (int j = 0; j < QkBoxes; ++j) tma_load_kv_box(map, bar, stage + j * kBoxBytes, j * kBoxCols, 0, page);
    } else {
      for (int j = rank; j < QkBoxes; j += 2) {
        tma_load_kv_box_multicast(map, bar, stage + j * kBoxBytes, j * kBoxCols, 0, page, uint16_t{0x3});
      }
    }
  }
};

// Q loader (one thread of warp 1): loads each item's Q tile once the consumers released
// the previous one. It runs apart from the KV loader so that the next item's KV stages
// stream in while the consumers still finish the current item.
template <int QkBoxes>
__device__ __forceinline__ void run_q_loader(const DecodeParams& p, const QMaps* q_maps, uint8_t* smem) {
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  int item_count = 0;
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item(p, w);
    if (!it.run) continue;
    Mbarrier::wait(q_empty, (item_count & 1) ^ 1);
    Mbarrier::arrive_and_expect_tx(q_full, QkBoxes * kBoxBytes);
    const int q_row = it.batch * p.rows + it.row_begin;
#pragma unroll
    for (int j = 0; j < QkBoxes; ++j) {
      // The latent boxes come from q (or q_nope), the rope box from q_pe when Q is given
      // in two tensors, else from q's columns 512..575 (q_pe_col 512).
      const bool rope = j >= kLatentBoxes;
      tma_load_q_box(rope ? &q_maps->rope : &q_maps->latent, q_full, smem + SmemLayout::q + j * kBoxBytes,
                     rope ? p.q_pe_col : j * kBoxCols, q_row);
    }
    ++item_count;
  }
}

// KV loader (one thread of warp 0): streams every item's KV blocks through the stage ring
// and reports data errors (seqlens, page indices) to the error word.
template <KernelMode Mode, int QkBoxes>
__device__ __forceinline__ void run_kv_loader(const DecodeParams& p, const PagedKvLoader64<QkBoxes>& kv,
                                              uint8_t* smem) {
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + SmemLayout::barriers);
  uint64_t* full = bars + 2;
  uint64_t* empty = bars + 2 + kStages;
  volatile int32_t* stage_flags = reinterpret_cast<int32_t*>(smem + SmemLayout::stage_flags);
  uint32_t errors = 0;
  int block_count = 0;
  const int rank = cta_rank_in_cluster();
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item(p, w);
    errors |= it.errors;
    if (!it.run) continue;
    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      const int stage = block_count % kStages;
      // The block-table read goes before the wait: its latency (an L2 round trip) then
      // overlaps the consumers' use of the stage instead of delaying the refill.
      int32_t page;
      const uint32_t err = kv.page_of(it.batch, blk, page);
      errors |= err;
      Mbarrier::wait(empty + stage, ((block_count / kStages) & 1) ^ 1);
      // The flag is stored before the arrive that completes with the TMA bytes (release),
      // so a consumer that passed the full barrier (acquire) sees it.
      stage_flags[stage] = err != 0;
      if constexpr (Mode == KernelMode::kMathOnly) {
        Mbarrier::arrive(full + stage);
      } else {
        kv.issue(page, full + stage, smem + SmemLayout::kv + stage * kTileBytes, p.cluster_size, rank);
      }
    }
  }
  if (errors) atomicOr(p.error_word, errors);
}

}  // namespace kbmla::sm90
