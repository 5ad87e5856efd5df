// Producer role: two threads of the producer warpgroup walk the same items as the
// consumers; one keeps the KV stage ring fed by TMA, the other loads each item's Q tile.
// PagedKvLoader is the extension point for other dtypes (issue 5): it maps (request, KV
// block) to TMA boxes and flags blocks it cannot load.
#pragma once

#include "src/sm90/decode/kernel.hpp"
#include "src/sm90/decode/primitives.cuh"
#include "src/sm90/decode/work.cuh"

namespace kbmla::sm90 {

// Paged bf16 loader for page sizes 2^k in 1..256. A KV block is 64 tokens:
//  - pages of 64 or more tokens: the cache is viewed as pages of 64 ("virtual pages",
//    page * (page_size / 64) + block % (page_size / 64)), one box per 64 columns;
//  - smaller pages: a block spans 64 / page_size pages, each a box of page_size rows
//    written at row page_size * k of the stage. The 128-byte swizzle is a function of the
//    shared-memory address, so row r of every box lands where the wgmma descriptors
//    expect it. Pages past the request's last token are not loaded (their block-table
//    entries need not be valid); the barrier expects only the bytes that come.
// QkBoxes 64-column boxes per row (9 for d_qk 576, 8 for 512; the stage has room for 9).
template <int QkBoxes>
struct PagedKvLoader {
  const CUtensorMap* map;
  const int32_t* block_table;
  int max_pages;
  int64_t num_pages;
  int page_size;
  int page_log2;  // log2(page_size)

  static constexpr int kPrefetch = 2;  // block-table entries read before the stage wait

  struct Block {
    int32_t page[kPrefetch];  // pages (virtual pages for page_size >= 64) of the first sub-pages
    int sub_pages;            // boxes of rows this block needs (1 for page_size >= 64)
    uint32_t errors;
  };

  __device__ __forceinline__ uint32_t checked(int32_t& page) const {
    if (page >= 0 && page < num_pages) return 0;
    page = 0;  // keeps the TMA in bounds; the consumers see the stage flag and write zeros
    return kErrPageIndexOutOfRange;
  }

  // The block's first pages, read before the stage wait so that the block-table latency
  // overlaps the consumers' use of the stage.
  __device__ __forceinline__ Block begin(int batch, int block, int seqlen) const {
    Block k{};
    const int32_t* row = block_table + int64_t{batch} * max_pages;
    if (page_log2 >= 6) {
      const int shift = page_log2 - 6;
      int32_t page = row[block >> shift];
      k.errors = checked(page);
      k.page[0] = (page << shift) + (block & ((1 << shift) - 1));
      k.sub_pages = 1;
      return k;
    }
    const int tokens = min(kBlockTokens, seqlen - block * kBlockTokens);
    k.sub_pages = (tokens + page_size - 1) >> page_log2;
    const int first = block << (6 - page_log2);
#pragma unroll
    for (int i = 0; i < kPrefetch; ++i) {
      if (i < k.sub_pages) {
        k.page[i] = row[first + i];
        k.errors |= checked(k.page[i]);
      }
    }
    return k;
  }

  __device__ __forceinline__ void issue_rows(int sub, int32_t page, uint64_t* bar, uint8_t* stage,
                                             int cluster_size, int rank) const {
    uint8_t* dst = stage + sub * page_size * 128;  // rows of 64 bf16 = 128 bytes per box
    if (cluster_size == 1) {
#pragma unroll
      for (int j = 0; j < QkBoxes; ++j) tma_load_kv_box(map, bar, dst + j * kBoxBytes, j * kBoxCols, 0, page);
    } else {
      // Each producer of the 2-CTA cluster issues every other box, multicast to both, so
      // each KV byte leaves L2 once per q tile.
      for (int j = rank; j < QkBoxes; j += 2) {
        tma_load_kv_box_multicast(map, bar, dst + j * kBoxBytes, j * kBoxCols, 0, page, uint16_t{0x3});
      }
    }
  }

  // Pages of fewer than 16 tokens: the entries past the prefetched ones, checked before
  // the stage flag is stored (issue() reads them again, from L1).
  __device__ __forceinline__ uint32_t check_rest(const Block& k, int batch, int block) const {
    uint32_t errors = 0;
    const int32_t* row = block_table + int64_t{batch} * max_pages + (block << (6 - page_log2));
    for (int i = kPrefetch; i < k.sub_pages; ++i) {
      int32_t page = row[i];
      errors |= checked(page);
    }
    return errors;
  }

  // Every CTA of the cluster expects the whole stage (the rows that come).
  __device__ __forceinline__ void issue(const Block& k, int batch, int block, uint64_t* bar, uint8_t* stage,
                                        int cluster_size, int rank) const {
    const int rows = page_log2 >= 6 ? kBlockTokens : k.sub_pages * page_size;
    Mbarrier::arrive_and_expect_tx(bar, QkBoxes * rows * 128);
    for (int i = 0; i < k.sub_pages && i < kPrefetch; ++i) issue_rows(i, k.page[i], bar, stage, cluster_size, rank);
    if (k.sub_pages > kPrefetch) {
      const int32_t* row = block_table + int64_t{batch} * max_pages + (block << (6 - page_log2));
      for (int i = kPrefetch; i < k.sub_pages; ++i) {
        int32_t page = row[i];
        checked(page);
        issue_rows(i, page, bar, stage, cluster_size, rank);
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
__device__ __forceinline__ void run_kv_loader(const DecodeParams& p, const PagedKvLoader<QkBoxes>& kv,
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
      const auto block = kv.begin(it.batch, blk, it.seqlen);
      uint32_t err = block.errors;
      if (block.sub_pages > kv.kPrefetch) err |= kv.check_rest(block, it.batch, blk);
      errors |= err;
      Mbarrier::wait(empty + stage, ((block_count / kStages) & 1) ^ 1);
      // The flag is stored before the arrive that completes with the TMA bytes (release),
      // so a consumer that passed the full barrier (acquire) sees it.
      stage_flags[stage] = err != 0;
      if constexpr (Mode == KernelMode::kMathOnly) {
        Mbarrier::arrive(full + stage);
      } else {
        kv.issue(block, it.batch, blk, full + stage, smem + SmemLayout::kv + stage * kTileBytes, p.cluster_size, rank);
      }
    }
  }
  if (errors) atomicOr(p.error_word, errors);
}

}  // namespace kbmla::sm90
