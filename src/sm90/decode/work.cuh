// Work items of the decode kernel: the scheduler walk (work list or the seed's static
// schedulers) and the resolution of a tile coordinate into the KV blocks and rows this
// CTA handles. Producer and consumers call the same code on the same inputs, so they
// agree on every item and every block count without talking to each other.
#pragma once

#include <cstdint>

#include "kbmla/schedulers.hpp"
#include "src/sm90/decode/config.hpp"
#include "src/sm90/decode/params.hpp"

namespace kbmla::sm90 {

struct Item {
  bool run;          // false: nothing for this CTA (no rows, or request without work)
  int q_tile, batch, split;
  int seqlen;        // clamped to [0, max_pages * page_size]
  int row_begin;     // first row (within the request) of this CTA's slice (p.cta_rows rows)
  int blk_begin, blk_end;  // KV blocks to process, clipped to the slice's visible keys
  int slot;          // partial-output slot, or -1 when this item writes the final output
  uint32_t errors;   // DeviceErrorBits seen while resolving
};

class TileWalker {
 public:
  __device__ TileWalker(const DecodeParams& p)
      : policy_(p.policy),
        static_(p.sched, int(blockIdx.x), int(blockIdx.x), int(blockIdx.y), int(blockIdx.z), p.grid_ctas),
        list_(p.sched, p.work_list, int(blockIdx.x), p.grid_ctas) {}

  __device__ WorkTileInfo current() const {
    return policy_ == KernelPolicy::kWorkList ? list_.current_work() : static_.current_work();
  }
  __device__ void advance() {
    if (policy_ == KernelPolicy::kWorkList) {
      list_.advance();
    } else {
      static_.advance();
    }
  }

 private:
  KernelPolicy policy_;
  StaticTileScheduler static_;
  WorkListTileScheduler list_;
};

// A device-made plan that failed means no work: every CTA returns (the header is one for
// the grid, so a cluster leaves together before any multicast); CTA 0 reports it.
__device__ __forceinline__ bool plan_failed(const DecodeParams& p) {
  if (p.plan_header == nullptr || p.plan_header->status == 0) return false;
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicOr(p.error_word, kErrPlanFailed);
  return true;
}

// Calls visit(tile) for every work tile of this CTA, the walk of TileWalker, but with one
// loop per policy: only the active scheduler's state is live, which the producer's 40
// registers need (holding both schedulers' state spilled there).
template <class Visit>
__device__ __forceinline__ void for_each_work_tile(const DecodeParams& p, Visit&& visit) {
  if (p.policy == KernelPolicy::kWorkList) {
    WorkListTileScheduler s(p.sched, p.work_list, int(blockIdx.x), p.grid_ctas);
    for (WorkTileInfo w = s.current_work(); w.valid; s.advance(), w = s.current_work()) visit(w);
  } else {
    StaticTileScheduler s(p.sched, int(blockIdx.x), int(blockIdx.x), int(blockIdx.y), int(blockIdx.z), p.grid_ctas);
    for (WorkTileInfo w = s.current_work(); w.valid; s.advance(), w = s.current_work()) visit(w);
  }
}

// Keys visible to row r (within the request): [0, visible_keys).
__device__ __forceinline__ int visible_keys(const DecodeParams& p, int batch, int seqlen, int row) {
  if (row >= p.rows) return 0;
  return p.vis.visible(batch, seqlen, row);
}

// kSlicedRows: the per-tensor split-role kernel's roles, whose CTAs of a 2-CTA tile take
// slices of p.cta_rows rows (kernel.hpp, cluster_cta_rows); every other kernel's slices
// are 64 rows (a constant: their code does not read p.cta_rows).
template <bool kSlicedRows = false>
__device__ __forceinline__ Item resolve_item(const DecodeParams& p, const WorkTileInfo& w) {
  Item it{};
  it.q_tile = w.q_tile;
  it.batch = w.batch;
  it.split = w.split;
  it.slot = -1;
  int L = p.seqlens[w.batch];
  if (L < 0) {
    it.errors |= kErrSeqlenNegative;
    L = 0;
  } else if (L > p.seqlen_capacity) {
    it.errors |= kErrSeqlenBeyondBlockTable;
    L = p.seqlen_capacity;
  }
  it.seqlen = L;
  // Both CTAs of a cluster share the KV stream (multicast), so whether an item runs and
  // which blocks it covers are decided on the whole q tile: a CTA whose 64 rows lie past
  // the request's rows (or see fewer keys than its peer's) still loads its half of every
  // box and masks; its epilogue writes nothing for rows >= p.rows.
  const int tile_begin = w.q_tile * p.tile_rows;
  it.row_begin = tile_begin + w.cta_in_cluster * (kSlicedRows ? p.cta_rows : kRowsPerCta);
  const int ns = p.splits.num_splits[w.batch];
  it.run = tile_begin < p.rows && ns > 0 && w.split < ns;
  if (!it.run) return it;
  const int off = p.splits.bounds_offset[w.batch];
  const int b0 = p.splits.bounds[off + w.split];
  const int b1 = p.splits.bounds[off + w.split + 1];
  const int blocks = (L + kBlockTokens - 1) / kBlockTokens;
  // The last split must end exactly at the request's last block: otherwise the seqlens
  // on the device are not the ones the plan was made for.
  if (w.split == ns - 1 && b1 != blocks) it.errors |= kErrPlanMismatch;
  const int last_row = min(p.rows, tile_begin + p.tile_rows) - 1;
  const int visible_blocks = (visible_keys(p, w.batch, L, last_row) + kBlockTokens - 1) / kBlockTokens;
  it.blk_begin = b0;
  it.blk_end = max(b0, min(b1, visible_blocks));
  if (ns > 1) it.slot = p.splits.first_slot[w.batch] + w.split;
  return it;
}

}  // namespace kbmla::sm90
