// Kernel parameters of the sm_90a decode (host and device). Built by the runtime from a
// validated DevicePlan and DecodeArgs.
#pragma once

#include <cstdint>

#include "kbmla/schedulers.hpp"
#include "src/common/rows.hpp"
#include "kbmla/work_format.hpp"

namespace kbmla::sm90 {

enum class KernelPolicy : int { kWorkList = 0, kStatic = 1, kStaticPersistent = 2 };

// Ceiling spike (bench/NOTES.md): kFull is the product; kLoadOnly streams every KV stage
// through TMA but the consumers only release it (the loader's bandwidth ceiling);
// kMathOnly runs the whole consumer loop on whatever the stages hold while the producer
// completes each stage without loading (the tensor and softmax ceiling).
enum class KernelMode : int { kFull = 0, kLoadOnly = 1, kMathOnly = 2 };

struct DecodeParams {
  // Problem.
  int batch;
  int q_len;
  int heads;
  int rows;            // heads * q_len
  int d_qk;            // 576 or 512 (selects the instantiation)
  int num_q_tiles;
  int tile_rows;       // 64 * cluster_size
  int cluster_size;
  int page_size;
  int page_log2;       // log2(page_size): the loader's shifts
  bool gather_rows;    // page_size < kGatherBelowPage: cp.async row gather instead of TMA
  const uint8_t* kv_cache;  // the cache itself, for the row gather
  // fp8 cache only (device): the cache's per-tensor scale, and Q's scales: row r reads
  // q_scale[r * q_scale_stride] (stride 1: the quantiser's per-row scales in the
  // workspace; 0: the one scale of a Q the caller gave in e4m3).
  const float* kv_scale;
  const float* q_scale;
  int q_scale_stride;
  // fp8 caches with a bf16 Q (q_inline): the consumers quantise each item's Q tile
  // themselves (q_inline_fp8.cuh) from row r = batch * rows + row in the request: columns
  // [0, q_latent_cols) at q_bf16 + r * q_row, the rest (per-tensor, d_qk 576) at
  // q_pe_bf16 + r * q_pe_row (elements; the per-block kernel's bf16 rope still comes by
  // TMA); q_scale is unused then.
  bool q_inline;
  // The per-tensor split-role kernel with a bf16 Q (q_staged_fp8.cuh): q_maps are maps of
  // the bf16 Q in boxes of 32 rows, the softmax warpgroup quantises each item's rows from
  // shared memory; q_scale is unused then.
  bool q_staged;
  const void* q_bf16;
  const void* q_pe_bf16;
  int64_t q_row;
  int64_t q_pe_row;
  int q_latent_cols;
  int max_pages;
  int seqlen_capacity; // min(max_pages * page_size, INT_MAX): longer seqlens are an error
  // Rows of each CTA's slice of a cluster's tile: CTA c of the cluster starts at row
  // tile_begin + c * cta_rows. 64, or 48 where a request's 65..96 rows run the per-tensor
  // fp8 split-role kernel (kernel.hpp, cluster_cta_rows): two slices of at most 48 rows,
  // P V over 48 rows in both CTAs instead of 64 in both. Only that kernel reads it
  // (resolve_item<true>). (Here: in the padding before num_pages, so that no other
  // field moves and the other kernels' code stays as it was.)
  int cta_rows;
  int64_t num_pages;
  float scale_log2;    // softmax scale * log2(e)
  int q_pe_col;        // column of the rope part in the q_pe map: 0 (separate q_pe) or 512
  KeyVisibility vis;   // causal mask, with global positions under context parallelism
  const int32_t* block_table;  // [batch, max_pages]
  const int32_t* seqlens;      // [batch]
  // Outputs: out bf16 (512 columns) and lse fp32, strided rows; see OutputView.
  OutputView output;
  // Workspace: partial O [slots, rows, 512] (fp32 for a bf16 cache, bf16 for the fp8
  // caches: src/combine/combine.hpp, PartialFormat), partial LSE [slots, rows] fp32 (log2).
  void* partial_o;
  float* partial_lse;
  // Early merges (work_format.hpp, CombineSync): after writing its rows of a partial slot
  // a CTA sets the piece flag of (slot, row_begin / cta_rows); null: the combine waits for
  // this grid instead and no flag is written.
  unsigned long long* piece_flags;
  int piece_row_groups;                   // flags per slot: ceil(rows / 64) (>= ceil(rows / cta_rows))
  const CombineSync* combine_sync;        // its epoch names the call in the flags
  uint32_t* error_word;
  unsigned long long* timeline;  // optional: {start, end, smid, items} per CTA
  unsigned long long* item_timeline;  // optional: DecodeArgs::item_timeline
  // Plan.
  const DevicePlanHeader* plan_header;  // device-made plans: a failed plan means no work
  KernelPolicy policy;
  const int32_t* work_list;
  SplitTableView splits;
  StaticTileSchedulerParams sched;  // B, q tiles, cluster, split_kv (static) / B for decode
  int grid_ctas;                    // CTAs in the (flattened) grid
};

}  // namespace kbmla::sm90
