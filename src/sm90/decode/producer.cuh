// Producer role: warps of the producer warpgroup walk the same items as the consumers.
// Warp 0 keeps the KV stage ring fed (TMA boxes, or a cp.async row gather for small
// pages), one thread of warp 1 loads each item's Q tile. PagedKvLoader maps (request, KV
// block) to loads for every page size and cache dtype and flags blocks it cannot load.
#pragma once

#include "src/sm90/decode/config_fp8.hpp"
#include "src/sm90/decode/config_fp8_block.hpp"
#include "src/sm90/decode/kernel.hpp"
#include "src/sm90/decode/primitives.cuh"
#include "src/sm90/decode/work.cuh"

namespace kbmla::sm90 {

// What the loaders need of a kernel's shared memory: where Q, the KV stages, the barriers
// and the stage flags live, how many stages the ring has, and the TMA box geometry (64
// columns of 2 or 1 bytes). kScaleRowBytes: bytes of per-token scales after the boxes of
// a stage row (the per-block fp8 cache's 4 fp32, in their own unswizzled box); Maps: the
// cache's tensor maps (one, or data + scales).
struct Bf16Smem {
  using Layout = SmemLayout;
  using Maps = CUtensorMap;
  static constexpr bool kWideLatent = false;
  static constexpr uint32_t kBoxBytes = sm90::kBoxBytes;  // 8192
  static constexpr uint32_t kQBoxBytes = kBoxBytes;
  static constexpr uint32_t kBoxRowBytes = 128;
  static constexpr uint32_t kScaleRowBytes = 0;
  static constexpr uint32_t kStageBytes = kTileBytes;
  static constexpr int kStages = sm90::kStages;
};
struct Fp8Smem {
  using Layout = fp8::SmemLayout;
  using Maps = KvFp8Maps;
  static constexpr bool kWideLatent = true;  // 128-byte latent boxes (config_fp8.hpp)
  static constexpr uint32_t kRopeRowBytes = fp8::kBoxRowBytes;  // the rope box: 64 e4m3
  static constexpr uint32_t kQLatentBoxBytes = fp8::kLatentBoxBytes;
  static constexpr uint32_t kBoxBytes = fp8::kBoxBytes;  // 4096
  static constexpr uint32_t kQBoxBytes = kBoxBytes;
  static constexpr uint32_t kBoxRowBytes = fp8::kBoxRowBytes;
  static constexpr uint32_t kScaleRowBytes = 0;
  static constexpr uint32_t kStageBytes = fp8::kTileBytes;
  static constexpr int kStages = fp8::kStages;
};
template <bool kNarrow>
struct Fp8BlockSmem {
  using Layout = fp8_block::SmemLayoutT<kNarrow>;
  using Maps = KvBlockMaps;
  static constexpr bool kWideLatent = true;  // 128-byte latent and rope boxes (config_fp8_block.hpp)
  static constexpr uint32_t kRopeRowBytes = fp8::kLatentBoxRowBytes;  // the rope box: 64 bf16
  static constexpr uint32_t kQLatentBoxBytes = Layout::kQLatentBoxBytes;
  static constexpr uint32_t kBoxBytes = fp8::kBoxBytes;  // 4096
  static constexpr uint32_t kQBoxBytes = Layout::kQBoxBytes;  // 16 or 64 rows
  static constexpr uint32_t kBoxRowBytes = fp8::kBoxRowBytes;
  static constexpr uint32_t kScaleRowBytes = fp8_block::kScaleRowBytes;
  static constexpr uint32_t kStageBytes = fp8_block::kStageBytes;
  static constexpr int kStages = Layout::kStages;
};

// The cache's data map: the one map, or the per-block cache's data map.
__device__ __forceinline__ const CUtensorMap* data_map(const CUtensorMap* m) { return m; }
__device__ __forceinline__ const CUtensorMap* data_map(const KvBlockMaps* m) { return &m->data; }
__device__ __forceinline__ const CUtensorMap* data_map(const KvFp8Maps* m) { return &m->latent; }

// Paged loader of bf16 or e4m3 rows for page sizes 2^k in 1..256, run by all 32 lanes of
// producer warp 0.
// A KV block is 64 tokens:
//  - pages of 64 or more tokens: the cache is viewed as 64-token parts ("virtual pages",
//    entry * (page_size / 64) + block % (page_size / 64)); lane 0 issues one box per 64
//    columns;
//  - smaller pages (page_log2 < 6): a block spans 64 >> page_log2 pages; lane k loads
//    page k (and k + 32 for pages of one token) as boxes of 2^page_log2 rows at row
//    k << page_log2 of the stage. The swizzle (128-byte; 64-byte for the per-tensor e4m3 rope box) is a function of the
//    shared-memory address, so row r of each box lands where the wgmma descriptors expect
//    it (TMA needs 128-byte aligned destinations: one-token e4m3 pages are gathered). Pages past the request's last
//    token are not loaded (their block-table entries need not be valid); the barrier
//    expects only the bytes that come, and the consumers mask (S) and zero (V) the stage
//    rows past the last token whatever they hold.
// Register budget: the bf16 kernel's producer has 40 registers. Spreading the pages over the lanes
// keeps one block-table entry per lane live across the stage wait and no loop state (a
// one-thread loop over the pages spilled 20-76 bytes).
// QkBoxes 64-column boxes per row (9 for d_qk 576, 8 for 512; the stage has room for 9).
// The loader reads the block table, page count and page size from the kernel parameters
// (constant-bank operands) instead of holding copies in registers.
template <int QkBoxes, class Smem = Bf16Smem>
struct PagedKvLoader {
  static constexpr uint32_t kBoxBytes = Smem::kBoxBytes;
  static constexpr uint32_t kBoxRowBytes = Smem::kBoxRowBytes;
  static constexpr uint32_t kScaleRowBytes = Smem::kScaleRowBytes;
  // Box j of a row group. bf16: columns 64 j of the cache row (the rope box, j = 8, at
  // column 512). kWideLatent (both fp8 caches): four 128-byte latent boxes, the rope box,
  // then the per-block cache's scale box (bytes 512..527 of the row, unswizzled, after the
  // stage's boxes).
  static constexpr int kBoxes = Smem::kWideLatent ? fp8::kWideLatentBoxes + (QkBoxes > kLatentBoxes ? 1 : 0) +
                                                        (kScaleRowBytes > 0 ? 1 : 0)
                                                  : QkBoxes;
  const typename Smem::Maps* maps;
  const DecodeParams& p;

  // Only the per-tensor fp8 kernel warms the address translation (warm_translation).
  static constexpr bool kWarmsTranslation = std::is_base_of_v<Fp8Smem, Smem>;
  __device__ __forceinline__ bool small_pages() const { return p.page_log2 < 6; }
  // The first token (within the request) of the page (or 64-token part) that `lane` loads
  // for `block`.
  __device__ __forceinline__ int part_first_token(int block, int lane) const {
    return (block << 6) + (small_pages() ? lane << p.page_log2 : 0);
  }

  // The second KV loader warp of the two-loader kernel instantiations (kernel.hpp,
  // two_loader_warps; run_kv_loader's kTwoLoaders).
  static constexpr int kHelperWarp = 3;

  // Block-table entries of the block's pages (pages of the block that lie past the
  // request's last token included: only pages_of() of them are used).
  __device__ __forceinline__ const int32_t* entries(int batch, int block) const {
    const int index = small_pages() ? block << (6 - p.page_log2) : block >> (p.page_log2 - 6);
    return p.block_table + int64_t{batch} * p.max_pages + index;
  }

  // Small pages the block needs: those holding its tokens below seqlen (a block the
  // loader sees has at least one).
  __device__ __forceinline__ int pages_of(int block, int seqlen) const {
    const int tokens = min(kBlockTokens, seqlen - block * kBlockTokens);
    return ((tokens - 1) >> p.page_log2) + 1;
  }

  // This lane's entry, read before the stage wait so that its latency (an L2 round trip)
  // overlaps the consumers' use of the stage instead of delaying the refill.
  __device__ __forceinline__ int32_t lane_entry(int batch, int block, int seqlen, int lane) const {
    if (!small_pages()) return lane == 0 ? *entries(batch, block) : 0;
    return lane < pages_of(block, seqlen) ? entries(batch, block)[lane] : 0;
  }

  // The per-tensor fp8 kernel, pages of 32 tokens or more: each lane touches the start of
  // the part it will load (prefetch.global.L2 of one line) as soon as it has the block-table
  // entry, a stage wait before the boxes are issued. Inferred to warm the address
  // translation of a page the stream has not touched (not profiled). Two alternated runs
  // on an H200 (bench/NOTES.md v30): B128_Sq1 88.1-88.7 -> 83.3-84.7 us, page 128
  // 182.6-182.8 -> 173.4-174.8, lognormal_H16_Sq1 180.5-181.5 -> 174.7-179.2, page 32 and
  // the 64-row tiles level; pages of 16 tokens (which skip it) ran 198-203 -> 208-210 with
  // the code present. The bf16 and per-block kernels measured level with it: left out.
  __device__ __forceinline__ void warm_translation(int32_t entry, int block, int seqlen, int lane,
                                                   bool mine = true) const {
    // Nothing may read `entry` on the path of pages below 32 tokens: its load's latency is
    // meant to pass behind the stage wait (a combined condition made ptxas test entry < 0
    // there too, and page 16 waited for the load: 198-203 -> 208-210 us, bench/NOTES.md v30).
    // So the page-size test is a branch of its own and the entry is clamped, not tested.
    if (p.page_log2 < 5) return;
    if (!mine || lane >= (small_pages() ? pages_of(block, seqlen) : 1)) return;
    const int32_t page = min(max(entry, 0), int32_t(p.num_pages - 1));  // num_pages < 2^31 (KvCache)
    constexpr int64_t kRowBytes = QkBoxes * int64_t{kBoxRowBytes} + kScaleRowBytes;
    const int token0 = part_first_token(block, lane);
    const int64_t token = (int64_t{page} << p.page_log2) + (token0 & ((1 << p.page_log2) - 1));
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p.kv_cache + token * kRowBytes));
  }

  // An invalid page becomes page 0 so that the TMA stays in bounds; the consumers see the
  // stage flag and write zeros for the item.
  __device__ __forceinline__ uint32_t checked(int32_t& page) const {
    if (page >= 0 && page < p.num_pages) return 0;
    page = 0;
    return kErrPageIndexOutOfRange;
  }

  // Bytes the stage receives for this block (what each CTA of a cluster expects); with
  // two_loader_role 0 or 1, only those of the parts k with k % 2 == role (run_kv_loader's
  // kTwoLoaders).
  __device__ __forceinline__ uint32_t stage_bytes(int block, int seqlen, int two_loader_role = -1) const {
    constexpr uint32_t kRowBytes = QkBoxes * kBoxRowBytes + kScaleRowBytes;
    if (!small_pages()) return kRowBytes * kBlockTokens;
    const int pages = pages_of(block, seqlen);
    const int parts = two_loader_role < 0 ? pages : (pages + 1 - two_loader_role) >> 1;
    return kRowBytes * uint32_t(parts << p.page_log2);
  }

  // Box j (kBoxes above) of the row group (a 64-token part or one small page) whose first
  // row lands at row `row0` of the stage.
  __device__ __forceinline__ void issue_box(int j, int32_t page, uint64_t* bar, uint8_t* stage, int row0,
                                            bool multicast) const {
    const CUtensorMap* map = data_map(maps);
    uint8_t* dst = stage + j * kBoxBytes + row0 * kBoxRowBytes;
    int col = j * kBoxCols;
    if constexpr (Smem::kWideLatent) {
      // Four 128-byte latent boxes, the rope box (64 e4m3, or the per-block cache's 64 bf16
      // at byte 528), the per-block cache's scale box (bytes 512..527, unswizzled).
      if (j < fp8::kWideLatentBoxes) {
        dst = stage + j * fp8::kLatentBoxBytes + row0 * fp8::kLatentBoxRowBytes;
        col = j * fp8::kLatentBoxRowBytes;
      } else if (j == fp8::kWideLatentBoxes) {
        dst = stage + fp8::kRopeBoxOffset + row0 * Smem::kRopeRowBytes;
        if constexpr (kScaleRowBytes > 0) {
          col = fp8_block::kRopeOffset;
        } else {
          map = &maps->rope;
          col = kDqkNoRope;
        }
      } else {
        if constexpr (kScaleRowBytes > 0) {
          map = &maps->scales;
          dst = stage + QkBoxes * kBoxBytes + row0 * kScaleRowBytes;
          col = fp8_block::kScalesOffset;
        }
      }
    }
    if (multicast) {
      tma_load_kv_box_multicast(map, bar, dst, col, 0, page, uint16_t{0x3});
    } else {
      tma_load_kv_box(map, bar, dst, col, 0, page);
    }
  }

  // The boxes of one row group (a 64-token part, or one small page) at stage row `row0`.
  // In a 2-CTA cluster each producer issues every other box, multicast to both, so each
  // KV byte leaves L2 once per q tile.
  __device__ __forceinline__ void issue_rows(int32_t page, uint64_t* bar, uint8_t* stage, int row0, int cluster_size,
                                             int rank) const {
    if (cluster_size == 1) {
#pragma unroll
      for (int j = 0; j < kBoxes; ++j) issue_box(j, page, bar, stage, row0, false);
    } else {
      for (int j = rank; j < kBoxes; j += 2) issue_box(j, page, bar, stage, row0, true);
    }
  }

  // This lane's loads of the block (lane 0 has expected stage_bytes; the warp arrives
  // afterwards); returns the error bits of the whole block, the same in every lane.
  __device__ __forceinline__ uint32_t load(int32_t entry, int batch, int block, int seqlen, int lane,
                                           uint64_t* bar, uint8_t* stage, int cluster_size, int rank,
                                           bool mine = true) const {
    uint32_t errors = 0;
    if (!small_pages()) {
      if (lane == 0) {
        errors = checked(entry);
        const int shift = p.page_log2 - 6;
        issue_rows((entry << shift) + (block & ((1 << shift) - 1)), bar, stage, 0, cluster_size, rank);
      }
    } else {
      const int pages = pages_of(block, seqlen);
      if (lane < pages && mine) {
        errors = checked(entry);
        issue_rows(entry, bar, stage, lane << p.page_log2, cluster_size, rank);
      }
      if (lane + 32 < pages && mine) {  // pages of one token: 64 per block
        int32_t page = entries(batch, block)[lane + 32];
        errors |= checked(page);
        issue_rows(page, bar, stage, lane + 32, cluster_size, rank);
      }
    }
    return __reduce_or_sync(0xffffffffu, errors);
  }

  // Pages below kGatherBelowPage tokens: a TMA box per page is too little per request
  // (page 1: 576 boxes of 128 bytes per block, measured 12.7 % of the copy ceiling), so
  // the warp gathers the block's token rows with 16-byte cp.async instead and writes the
  // 128-byte swizzle itself: chunk k (of 8) of row t of a box goes to chunk k ^ (t % 8).
  // Lane l copies chunks l, l + 32 (and l + 64 for lanes 0..7 when d_qk is 576) of each
  // row: all three are chunk l % 8 of boxes l / 8, + 4, + 8, so one swizzled offset serves.
  // Lane i holds the entries of pages i and i + 32. The copies are waited for and fenced
  // to the async proxy (wgmma reads the stage) before the warp arrives; each CTA of a
  // cluster gathers its own copy (no multicast).
  __device__ __forceinline__ uint32_t gather(int32_t entry, int batch, int block, int seqlen, int lane,
                                             uint32_t stage) const {
    constexpr int kRowBytes = QkBoxes * int(kBoxRowBytes) + int(kScaleRowBytes);
    const int tokens = min(kBlockTokens, seqlen - block * kBlockTokens);
    const int pages = pages_of(block, seqlen);
    uint32_t errors = 0;
    int32_t low = entry, high = 0;
    if (lane < pages) errors = checked(low);
    if (lane + 32 < pages) {
      high = entries(batch, block)[lane + 32];
      errors |= checked(high);
    }
    // e4m3 rows (kWideLatent): lane l copies chunk l of the latent part (box l / 8 of
    // 128-byte rows, chunk l % 8 at (l % 8) ^ t % 8); per-tensor: lanes 0..3 the rope's chunk
    // l (64-byte rows, at l ^ (t / 2) % 4); per-block (656-byte rows): lanes 0..7 the bf16
    // rope's chunk l (bytes 528 + 16 l, 128-byte rows, at l ^ t % 8) and lane 8 the scales
    // (bytes 512..527, the stage's unswizzled scale rows). bf16 rows: 128-byte box rows,
    // lane l chunk l % 8 of boxes l / 8, + 4, + 8.
    const uint8_t* lane_src = p.kv_cache + lane * 16;
    const uint32_t lane_dst = stage + (lane >> 3) * kBoxBytes;
    for (int t = 0; t < tokens; ++t) {
      const int page_index = t >> p.page_log2;
      const int32_t page = __shfl_sync(0xffffffffu, page_index < 32 ? low : high, page_index & 31);
      const int64_t token = (int64_t{page} << p.page_log2) + (t & ((1 << p.page_log2) - 1));
      const uint8_t* src = lane_src + token * kRowBytes;
      if constexpr (Smem::kWideLatent) {
        const uint32_t row = ((lane ^ t) & 7) << 4;  // chunk l % 8 of a 128-byte row t
        cp_async_16(stage + (lane >> 3) * fp8::kLatentBoxBytes + t * fp8::kLatentBoxRowBytes + row, src);
        const uint32_t rope = stage + fp8::kRopeBoxOffset;
        if constexpr (kScaleRowBytes > 0) {
          if (lane < 8) cp_async_16(rope + t * Smem::kRopeRowBytes + row, src + fp8_block::kRopeOffset);
          if (lane == 8) {
            cp_async_16(stage + QkBoxes * kBoxBytes + t * kScaleRowBytes, src + fp8_block::kScalesOffset - 16 * 8);
          }
        } else if (QkBoxes > kLatentBoxes && lane < 4) {
          cp_async_16(rope + t * Smem::kRopeRowBytes + (((lane ^ (t >> 1)) & 3) << 4), src + kDqkNoRope);
        }
      } else {
        const uint32_t dst = lane_dst + t * 128 + (((lane ^ t) & 7) << 4);
        cp_async_16(dst, src);
        cp_async_16(dst + 4 * kBoxBytes, src + 512);
        if (QkBoxes > 8 && lane < 8) cp_async_16(dst + 8 * kBoxBytes, src + 1024);
      }
    }
    cp_async_wait_all();
    fence_view_async_shared();
    return __reduce_or_sync(0xffffffffu, errors);
  }
};

// Q loader (one thread of warp 1): loads each item's Q tile once the consumers released
// the previous one. It runs apart from the KV loader so that the next item's KV stages
// stream in while the consumers still finish the current item.
// kCheckDcp: this thread also checks each item's context-parallel positions (the fp8
// kernel, whose consumers have no register to spare for it; bf16: consumer 0 does).
// kSlicedRows: the per-tensor split-role kernel's (resolve_item<true>).
template <int QkBoxes, class Smem = Bf16Smem, bool kCheckDcp = false, bool kSlicedRows = false>
__device__ __forceinline__ void run_q_loader(const DecodeParams& p, const QMaps* q_maps, uint8_t* smem) {
  using Layout = typename Smem::Layout;
  constexpr uint32_t kQBoxBytes = Smem::kQBoxBytes;  // the Q map's box: 64 rows, or 16 (Fp8BlockSmem<true>)
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Layout::barriers);
  uint64_t* q_full = bars + 0;
  uint64_t* q_empty = bars + 1;
  int item_count = 0;
  TileWalker walker(p);
  for (WorkTileInfo w = walker.current(); w.valid; walker.advance(), w = walker.current()) {
    const Item it = resolve_item<kSlicedRows>(p, w);
    if (!it.run) continue;
    if constexpr (kCheckDcp) {
      if (!p.vis.consistent(it.batch, it.seqlen)) atomicOr(p.error_word, kErrDcpPositions);
    }
    // With p.q_inline the consumers quantise Q themselves (q_inline_fp8.cuh); the per-block
    // kernel's bf16 rope box still comes from here.
    constexpr bool kRopeOnly = Smem::kScaleRowBytes > 0;
    if (p.q_inline && !kRopeOnly) continue;
    Mbarrier::wait(q_empty, (item_count & 1) ^ 1);
    const int q_row = it.batch * p.rows + it.row_begin;
    if (kRopeOnly && p.q_inline) {
      if constexpr (kRopeOnly) {
        Mbarrier::arrive_and_expect_tx(q_full, Smem::kQLatentBoxBytes);
        tma_load_q_box(&q_maps->rope, q_full, smem + Layout::q + fp8::kWideLatentBoxes * Smem::kQLatentBoxBytes,
                       p.q_pe_col, q_row);
      }
      ++item_count;
      continue;
    }
    Mbarrier::arrive_and_expect_tx(q_full, QkBoxes * kQBoxBytes);
    if constexpr (Smem::kWideLatent) {
      // Q as the stages: four 128-byte latent boxes (e4m3), the rope box (per-tensor: e4m3 at
      // column 512; per-block: the bf16 rope's bytes from q_pe_col).
#pragma unroll
      for (int j = 0; j < fp8::kWideLatentBoxes; ++j) {
        tma_load_q_box(&q_maps->latent, q_full, smem + Layout::q + j * Smem::kQLatentBoxBytes,
                       j * fp8::kLatentBoxRowBytes, q_row);
      }
      if constexpr (QkBoxes > kLatentBoxes) {
        tma_load_q_box(&q_maps->rope, q_full, smem + Layout::q + fp8::kWideLatentBoxes * Smem::kQLatentBoxBytes,
                       p.q_pe_col, q_row);
      }
    } else {
#pragma unroll
      for (int j = 0; j < QkBoxes; ++j) {
        // The latent boxes come from q (or q_nope), the rope box from q_pe when Q is given
        // in two tensors, else from q's columns 512..575 (q_pe_col 512).
        const bool rope = j >= kLatentBoxes;
        tma_load_q_box(rope ? &q_maps->rope : &q_maps->latent, q_full, smem + Layout::q + j * kQBoxBytes,
                       rope ? p.q_pe_col + (j - kLatentBoxes) * kBoxCols : j * kBoxCols, q_row);
      }
    }
    ++item_count;
  }
}

// KV loader (warp 0): streams every item's KV blocks through the stage ring and reports
// data errors (seqlens, page indices) to the error word.
// kTwoLoaders (blocks of 4+ small parts: kernel.hpp, two_loader_warps):
// this warp loads the parts k with k % 2 == role (0: warp 0, 1: kHelperWarp); each warp
// expects its own bytes, sets its own byte of the stage flag and arrives on the full barrier,
// which then counts two arrivals. Why: issuing one TMA box per part and lane is ~9
// instructions of one warp (the compiler's loop over the active lanes: ELECT, R2UR,
// UTMALDG); a block of 16-token pages is 20 boxes (fp8), which kept one loader behind the
// consumers on half the blocks (ncu, lognormal_H16_Sq1 page 16: the warp found the stage
// already empty for 9,053 of 17,992 blocks, 6,355 at page 64's 32-token parts; the
// consumers' long-scoreboard samples doubled). Measured: bench/NOTES.md v31.
// kGatherWarps (the row gather, kGatherRows): this warp gathers the blocks b with
// b % kGatherWarps == role, each block whole, waited for, fenced and arrived on by its
// warp alone (the full barrier counts one arrival). Why: a warp's gather waits for its
// block's rows before it arrives (cp.async.wait_all, then the proxy fence a wgmma reader
// needs), so one warp kept one block in flight per CTA: ~4.8 us a block of 64 random
// rows at page 1, whatever their bytes (bench/NOTES.md v21, v39). The warp of block b
// waits for b's stage to be released (block b - kStages), as the one warp did, but no
// longer for block b - 1 to land first: fewer waits, none new, so no wait cycle.
template <KernelMode Mode, int QkBoxes, bool kGatherRows, class Smem = Bf16Smem, bool kTwoLoaders = false,
          int kGatherWarps = 1>
__device__ __forceinline__ void run_kv_loader(const DecodeParams& p, const PagedKvLoader<QkBoxes, Smem>& kv,
                                              uint8_t* smem, int role = 0) {
  static_assert(kGatherWarps == 1 || (kGatherRows && !kTwoLoaders), "gather warps split a gathering loader");
  static_assert(kGatherWarps <= Smem::kStages, "more gather warps than stages would only wait");
  using Layout = typename Smem::Layout;
  constexpr int kStages = Smem::kStages;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + Layout::barriers);
  uint64_t* full = bars + 2;
  uint64_t* empty = bars + 2 + kStages;
  volatile int32_t* stage_flags = reinterpret_cast<int32_t*>(smem + Layout::stage_flags);
  const int lane = threadIdx.x % 32;
  uint32_t errors = 0;
  int block_count = 0;
  const int rank = cta_rank_in_cluster();
  // This lane's parts are this warp's: parts alternate between the two loader warps.
  const bool mine = !kTwoLoaders || (lane & 1) == role;
  int item_count = 0;  // items streamed
  [[maybe_unused]] int gated_items = 0;  // items with a Q gate (a Q stager counts the same ones)
  for_each_work_tile(p, [&](const WorkTileInfo& w) {
    const Item it = resolve_item(p, w);
    errors |= it.errors;
    if (!it.run) return;
    for (int blk = it.blk_begin; blk < it.blk_end; ++blk, ++block_count) {
      if constexpr (kGatherWarps > 1) {
        if (block_count % kGatherWarps != role) continue;  // another gather warp's block
      }
      if constexpr (requires { Smem::kQGateBlocks; }) {
        // A kernel whose Q is staged in parts (Fp8SplitSmem) holds back the item's later
        // blocks until its last Q part is issued, so that part is not queued behind them.
        // The gate orders issue only (no data depends on it) and cannot deadlock: the Q
        // loader issues that part once the softmax warpgroup starts the item, which needs
        // only blocks issued before. Only items of more than kQGateBlocks blocks have a
        // gate, and the Q loader arrives for those only (run_q_stager), so every phase of
        // q_issued[2] (by gated-item parity) is waited for once (compute-sanitizer
        // synccheck reported the un-waited phases of short items as missing waits, v39).
        if (p.q_staged && blk == it.blk_begin + Smem::kQGateBlocks) {
          Mbarrier::wait(Smem::q_issued(smem) + (gated_items & 1), (gated_items >> 1) & 1);
          ++gated_items;
        }
      }
      const int stage = block_count % kStages;
      const int32_t entry = mine ? kv.lane_entry(it.batch, blk, it.seqlen, lane) : 0;
      if constexpr (!kGatherRows && PagedKvLoader<QkBoxes, Smem>::kWarmsTranslation) {
        kv.warm_translation(entry, blk, it.seqlen, lane, mine);
      }
      Mbarrier::wait(empty + stage, ((block_count / kStages) & 1) ^ 1);
      uint64_t* bar = full + stage;
      uint32_t err;
      if constexpr (Mode == KernelMode::kMathOnly) {
        int32_t page = entry;
        err = __reduce_or_sync(0xffffffffu, kv.checked(page));
      } else {
        // Expect the bytes, issue, then store the flag and arrive: the arrive (release)
        // is what completes the phase once the bytes are in, so a consumer that passed
        // the full barrier (acquire) sees the flag; bytes that land earlier cannot
        // complete the phase, which still lacks this arrival.
        uint8_t* stage_ptr = smem + Layout::kv + stage * Smem::kStageBytes;
        if constexpr (kGatherRows) {
          err = kv.gather(entry, it.batch, blk, it.seqlen, lane, smem_addr(stage_ptr));
        } else {
          if (lane == 0) {
            Mbarrier::expect_transaction(bar, kv.stage_bytes(blk, it.seqlen, kTwoLoaders ? role : -1));
          }
          __syncwarp();
          err = kv.load(entry, it.batch, blk, it.seqlen, lane, bar, stage_ptr, p.cluster_size, rank, mine);
        }
      }
      if (lane == 0) {
        // Two loaders: each its own byte of the flag (the kernel zeroed the flags).
        if (kTwoLoaders) {
          reinterpret_cast<volatile uint8_t*>(stage_flags + stage)[role] = err != 0;
        } else {
          stage_flags[stage] = err != 0;
        }
        Mbarrier::arrive(bar);
      }
      errors |= err;
    }
    ++item_count;
  });
  if (errors && lane == 0) atomicOr(p.error_word, errors);
}

}  // namespace kbmla::sm90
