// Formats shared by the planner (host and device), the decode kernel and the combine.
//
// Work-list entry (int32): ((q_tile * B + batch) << 8) | split, or negative for "no work".
//   split < 256 (8 bits) and q_tile * B + batch < 2^23, so every valid entry is >= 0.
//
// Split table (one row per request b, arrays of B, plus one boundary array):
//   num_splits[b]     0 for a request with no work item (seqlen 0 or every row masked),
//                     1 when its items write the final output, > 1 when they write
//                     partials that the combine merges.
//   first_slot[b]     first partial-output slot of b when num_splits[b] > 1, else -1.
//   bounds_offset[b]  index into `bounds` of b's first boundary; split s covers KV blocks
//                     [bounds[off + s], bounds[off + s + 1]). Splits may differ in length.
//   bounds            num_splits[b] + 1 entries per request with work, 0 for others.
//
// Workspace (bytes, 256-aligned sections, caller-owned device memory):
//   [header: error word, CombineSync | partial LSE  slots x rows fp32 |
//    piece flags  slots x ceil(rows / 64) u64 | partial O  slots x rows x d_v fp32]
//   where rows = heads * q_len of one request; slot (first_slot[b] + s) holds split s of
//   request b for all its rows (each q tile writes its own rows). A piece flag marks one
//   CTA's 64 rows of a slot written in the current call (CombineSync says how). The fp8-cache kernels
//   write their partial O in bf16, in the first half of that section (src/combine/combine.hpp,
//   PartialFormat); the size stays the fp32 one, so one workspace serves every dtype.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kbmla/hd.hpp"

namespace kbmla {

constexpr int kWorkSplitBits = 8;
constexpr int kMaxSplitsPerRequest = 1 << kWorkSplitBits;   // 256
constexpr int32_t kMaxTileBatchIndex = 1 << 23;              // q_tile * B + batch < 2^23
constexpr int32_t kNoWork = -1;

static_assert(sizeof(int32_t) == 4, "work entries are 32-bit");
static_assert((int64_t{kMaxTileBatchIndex - 1} << kWorkSplitBits | (kMaxSplitsPerRequest - 1)) <= INT32_MAX,
              "the largest valid entry must stay non-negative");

KBMLA_HD int32_t make_work_entry(int q_tile, int batch, int num_batch, int split) {
  return ((q_tile * num_batch + batch) << kWorkSplitBits) | split;
}
KBMLA_HD int32_t work_entry_tile_batch(int32_t entry) { return entry >> kWorkSplitBits; }
KBMLA_HD int32_t work_entry_split(int32_t entry) { return entry & (kMaxSplitsPerRequest - 1); }

// Device-visible views of the split table (pointers into one plan buffer).
struct SplitTableView {
  const int32_t* num_splits;
  const int32_t* first_slot;
  const int32_t* bounds_offset;
  const int32_t* bounds;
};

// Error word bits raised by kernels in workspace[0]; the API reports them.
enum DeviceErrorBits : uint32_t {
  kErrSeqlenNegative = 1u << 0,        // seqlens[b] < 0
  kErrSeqlenBeyondBlockTable = 1u << 1, // seqlens[b] > max_pages * page_size
  kErrPageIndexOutOfRange = 1u << 2,    // block_table entry outside [0, num_pages)
  kErrPlanMismatch = 1u << 3,           // seqlens differ from those the plan was made for
  kErrPlanFailed = 1u << 4,             // the device planner rejected the seqlens (negative)
  kErrDcpPositions = 1u << 5,           // context parallel: a local length or kv offset that
                                        // the global length cannot have
};

// The combine merges requests with more splits than this with a block per row and column
// quarter (warps striding over splits), the others with a warp per row and quarter.
constexpr int kCombineNarrowSplits = 16;

// Counts a device-made plan leaves in device memory for the decode and combine launches,
// whose grids are sized by capacity (fixed under CUDA-graph capture).
struct DevicePlanHeader {
  int32_t status;              // PlanStatus; non-zero: the decode does nothing, sets kErrPlanFailed
  int32_t bad_index;           // the request that caused it
  int32_t num_split_requests;  // requests with > 1 split, listed wide first
  int32_t num_wide_requests;   // of which more than kCombineNarrowSplits splits
  int32_t num_zero_fill;
  int32_t num_slots;
  int32_t num_items;
  int32_t reserved;
};
static_assert(sizeof(DevicePlanHeader) == 32, "header layout is shared by host and device");

constexpr size_t kWorkspaceAlign = 256;

// DecodeArgs::item_timeline: the first kTimelineItems items of each CTA, kItemPhases
// timestamps each in kItemPhaseSlots 8-byte slots.
constexpr int kTimelineItems = 8;
constexpr int kItemPhases = 5;
constexpr int kItemPhaseSlots = 8;
static_assert(kItemPhases <= kItemPhaseSlots, "an item's phases fit its slots");

KBMLA_HD size_t align_up(size_t bytes, size_t align) { return (bytes + align - 1) / align * align; }

// The workspace header's words after the error word, set by init_workspace: how the
// combine merges a request while the decode still runs (src/combine/combine.cu, early
// merges). A decode CTA that wrote its 64 rows of a partial slot stores the piece's
// flag, piece_flag(epoch), after a release fence; the combine waits for the flags of a
// request's slots instead of the decode grid's end, then reads the partials. `epoch` counts
// the calls whose combine ran on this workspace (its last block to arrive advances it) from
// a host-clock value init_workspace sets, so a flag left by an earlier call, by a plan of
// another layout sharing the workspace, or from before a later init_workspace, never equals
// this call's, and nothing needs resetting between calls.
// A workspace that init_workspace did not prepare (no kCombineSyncReady) gets no early
// merges: its arrival count may hold anything, and the epoch would stop advancing.
struct CombineSync {
  uint64_t epoch;
  uint32_t arrivals;   // combine blocks of the current call past their last wait
  uint32_t fallbacks;  // waits that gave up and waited for the whole decode (diagnostic)
  uint64_t ready;      // kCombineSyncReady once init_workspace ran
};
constexpr size_t kCombineSyncOffset = 8;
constexpr uint8_t kCombineSyncReadyByte = 0xA7;  // init_workspace's memset of `ready`
constexpr uint64_t kCombineSyncReady = 0xA7A7A7A7A7A7A7A7ull;
static_assert(kCombineSyncOffset + sizeof(CombineSync) <= kWorkspaceAlign, "the header holds it");
// The flag value of a call: the epoch + 1 under a marker in the high word, so that neither
// zeroed memory nor partial data (as fp32 pairs the high word would read 2.7e26) matches.
KBMLA_HD uint64_t piece_flag(uint64_t epoch) { return (epoch + 1) ^ (uint64_t{0x6B626D6Cu} << 32); }
// One flag per 64 rows (a CTA's share of a q tile) of each slot.
KBMLA_HD int piece_row_groups(int rows_per_request) { return (rows_per_request + 63) / 64; }
// The flag of a row: its CTA's slice, of 64 rows or, in 2-CTA tiles of 65..96 rows on the
// per-tensor fp8 split-role kernel, of 48 (two flags a slot either way). Constant divisors: no
// division loop in the decode's epilogue or the merge's waits.
constexpr int kSlicedCtaRows = 48;  // (sm90 kernel.hpp, cluster_cta_rows)
KBMLA_HD int piece_of_row(int row, int rows_per_piece) {
  return rows_per_piece == kSlicedCtaRows ? row / kSlicedCtaRows : row / 64;
}

struct WorkspaceLayout {
  size_t error_word_offset;
  size_t partial_lse_offset;
  size_t piece_flags_offset;
  size_t partial_o_offset;
  size_t total_bytes;
};

KBMLA_HD WorkspaceLayout workspace_layout(int64_t num_slots, int rows_per_request, int d_v) {
  WorkspaceLayout w{};
  w.error_word_offset = 0;
  w.partial_lse_offset = kWorkspaceAlign;
  size_t lse_bytes = static_cast<size_t>(num_slots) * rows_per_request * sizeof(float);
  w.piece_flags_offset = w.partial_lse_offset + align_up(lse_bytes, kWorkspaceAlign);
  size_t flag_bytes = static_cast<size_t>(num_slots) * piece_row_groups(rows_per_request) * sizeof(uint64_t);
  w.partial_o_offset = w.piece_flags_offset + align_up(flag_bytes, kWorkspaceAlign);
  size_t o_bytes = static_cast<size_t>(num_slots) * rows_per_request * d_v * sizeof(float);
  w.total_bytes = w.partial_o_offset + align_up(o_bytes, kWorkspaceAlign);
  return w;
}

}  // namespace kbmla
