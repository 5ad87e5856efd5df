// Split-KV combine (arch-neutral CUDA): merges the partials of split requests into
// the bf16 output and natural-log LSE, writes O = 0 / LSE = -inf for every row without a
// visible key, and zero-fills the q tiles the plan lists.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kbmla/work_format.hpp"
#include "src/common/rows.hpp"

namespace kbmla {

// The element type of the partial O in the workspace (the LSE is fp32 either way).
// fp32 for a bf16 cache. bf16 for the fp8 caches: their values carry 3 mantissa bits
// (e4m3), so a partial O / l rounded to bf16's 8 adds ~1/32 of the error the cache already
// has, while the partials' write and read-back are half the bytes. With the cache at half
// bf16's bytes, fp32 partials were 7-14 % of a split 64-row call's traffic
// (uniform_B32_Sq4: 160 partial slots x 64 rows x 2 KiB, twice, against 302 MB of cache).
enum class PartialFormat { kFp32, kBf16 };

struct CombineParams {
  int batch, q_len, heads, rows, tile_rows;
  SplitTableView splits;
  // Requests with num_splits > 1: the first num_wide_requests have more than
  // kCombineNarrowSplits splits (a block per row and column quarter, warps striding over
  // splits); the rest are narrow (a warp per row).
  const int32_t* split_requests;
  int num_split_requests;
  int num_wide_requests;
  // The most splits of any wide request (0: none; unknown on the host for device-made plans:
  // kMaxSplitsPerRequest). Chooses the block size (combine.cu, kWarps).
  int max_wide_splits;
  // Wide merges summed in an order that does not depend on the block size (batch-invariant
  // plans; combine.cu, combine_wide): a request's bits then follow its own splits only.
  bool invariant_order;
  // Device-made plans: the counts above are capacities that size the grid, and the actual
  // counts (split requests, wide ones, zero-fill entries) are read from here.
  const DevicePlanHeader* header;
  // SMs of the device (0: unknown). A launch of at most this many blocks asks for enough
  // shared memory that no two of its blocks share an SM (combine.cu, kSpreadSmemBytes).
  int sm_count;
  const int32_t* zero_fill;       // entries (q tile, batch, 0)
  int num_zero_fill;
  const void* partial_o;          // [slots, rows, 512], O / l per split, in partial_format
  PartialFormat partial_format;
  const float* partial_lse;       // [slots, rows], log2
  OutputView output;              // bf16 out, LSE in the caller's base, strided rows
  // Early merges (work_format.hpp, CombineSync; the plans launch_choices.cpp's
  // early_merges_wanted picks, in full decodes): the
  // decode's piece flags (piece_row_groups per slot) and the workspace header. A merge then
  // waits for its request's flags, not for the decode grid, and runs while the decode's
  // other CTAs still stream. Null: every block waits for the decode grid first.
  const unsigned long long* piece_flags;
  int piece_row_groups;
  int piece_rows;  // rows per flag: the decode's DecodeParams::cta_rows (64, or 48)
  CombineSync* sync;
  // Optional instrumentation: block b writes {ns when its first task's partials were ready
  // (the decode grid's end without early merges), ns when it finished} (%globaltimer) at
  // timeline[2 * b]; combine_blocks(p) entries.
  unsigned long long* timeline;
};

// The blocks launch_combine launches for p (0: it launches nothing).
int64_t combine_blocks(const CombineParams& p);

// Whether its blocks get an SM each (a grid of at most p.sm_count blocks; combine.cu says
// why).
bool combine_spreads_blocks(const CombineParams& p);

// The kernel launch_combine runs for p: warps per block, and whether it is the narrow-only
// kernel (no wide path, four 8-warp blocks per SM) or the dense one (the wide path on bf16
// words at 64 registers); combine.cu says when.
struct CombineKernelChoice {
  int warps;
  bool narrow_only;
  bool dense;
};
CombineKernelChoice combine_kernel_choice(const CombineParams& p);

// Whether launch_combine's grid for p fits the device's SMs at once (p.sm_count known).
bool combine_fits_one_wave(const CombineParams& p);

// Launches nothing when there is nothing to merge or fill.
void launch_combine(const CombineParams& p, cudaStream_t stream);

}  // namespace kbmla
