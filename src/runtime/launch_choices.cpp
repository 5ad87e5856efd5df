// Choices the decode call makes from its plan: the fp8 kernels' Q path, the combine's
// launch shape, the instrumentation buffers' sizes.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kbmla/error.hpp"
#include "kbmla/schedulers.hpp"
#include "src/runtime/plan_impl.hpp"
#include "src/sm90/decode/kernel.hpp"

namespace kbmla {

namespace {
// CTAs of the static-persistent policy's grid (the seed's scheduler over the cluster slots).
int static_persistent_ctas(const DevicePlan::Impl& P) {
  const HostPlan& h = P.host;
  const StaticTileSchedulerParams s(true, h.shape.batch, h.counts.num_q_tiles, h.shape.cluster_size,
                                    P.options.static_splits);
  return StaticTileScheduler::grid_shape(s, h.shape.num_ctas / h.shape.cluster_size).x;
}
}  // namespace

namespace detail {

int max_items_per_cta(const DevicePlan::Impl& P) {
  const HostPlan& h = P.host;
  switch (P.options.policy) {
    case Policy::kWorkList:
      return P.device_planned ? std::numeric_limits<int>::max() : h.counts.max_items_per_cluster;
    case Policy::kStatic:
      return 1;
    case Policy::kStaticPersistent: {
      const int64_t clusters = static_persistent_ctas(P) / h.shape.cluster_size;
      const int64_t items = int64_t{h.shape.batch} * h.counts.num_q_tiles * P.options.static_splits;
      return int(std::min<int64_t>((items + clusters - 1) / std::max<int64_t>(clusters, 1), 1 << 30));
    }
  }
  return std::numeric_limits<int>::max();
}

// Small pages are gathered row by row (bf16: below kGatherBelowPage tokens, for speed;
// fp8: pages below 8 tokens, whose 128-byte swizzled boxes would start off the 1024-byte
// swizzle atom; fp8 with per-block scales: pages below 8 tokens, whose 16-byte scale rows
// would land off the 128-byte alignment TMA needs).
bool gathers_rows(const DecodeConfig& c) {
  return c.kv_dtype == KvDtype::kBFloat16 ? c.page_size < sm90::kGatherBelowPage : c.page_size < 8;
}

namespace {
// Whether a per-tensor fp8 call of this plan runs the split-role kernel (kernel.hpp,
// fp8_split_roles).
bool per_tensor_split_kernel(const DevicePlan::Impl& P) {
  const sm90::DecodeParams p = kernel_choice_params(P);
  return P.config.kv_dtype == KvDtype::kFp8E4m3 && sm90::fp8_split_kernel_wanted(p);
}

// KBMLA_Q_INLINE: "always", "never", or "auto" / unset (nullptr). Read per call (tests
// switch it), without allocating: the decode call's run path.
const char* q_inline_setting() {
  const char* e = std::getenv("KBMLA_Q_INLINE");
  if (e == nullptr || std::strcmp(e, "auto") == 0) return nullptr;
  require(std::strcmp(e, "always") == 0 || std::strcmp(e, "never") == 0, "KBMLA_Q_INLINE='", e,
          "' must be auto, always or never");
  return e;
}
}  // namespace

// The split-role kernel stages a bf16 Q by TMA and quantises it in its softmax warpgroup
// (q_staged_fp8.cuh) unless KBMLA_Q_INLINE=never asks for the quantiser: against the
// quantiser's e4m3 Q by TMA, bench/NOTES.md v34.
bool fp8_stages_q_in_kernel(const DevicePlan::Impl& P) {
  const char* setting = q_inline_setting();
  return per_tensor_split_kernel(P) && (setting == nullptr || std::strcmp(setting, "never") != 0);
}

// Measured on the per-tensor kernel (H200, bench/NOTES.md v27): in the kernel, the
// quantiser's launch (4-8 us of the call) is saved, and each item start waits for its
// quantisation, where the quantiser's Q comes ahead by TMA. Tiles of at most 16 rows (one
// round trip of two rows per warp) win either way (lognormal_H16_Sq1 189 -> 185 us), and
// so does any tile with one item per CTA (B1 42 -> 36, B128_Sq1 94.5 -> 90); 64-row tiles
// with several items per CTA lose (lognormal_H16_Sq4 246 -> 275, kimi 97 -> 106) and keep
// the quantiser, as do 2-CTA clusters (the cluster kernel has no registers to spare).
// KBMLA_Q_INLINE=always / never overrides the choice (tests, tuning; README).
bool fp8_quantises_q_in_kernel(const DevicePlan::Impl& P, int rows) {
  if (P.host.shape.cluster_size != 1) return false;
  if (const char* setting = q_inline_setting()) return std::strcmp(setting, "always") == 0;
  return rows <= sm90::kFp8NarrowRows || max_items_per_cta(P) <= 1;
}

QPath choose_q_path(const DevicePlan::Impl& P, QDtype q_dtype) {
  const DecodeConfig& c = P.config;
  require(q_dtype == QDtype::kBFloat16 || q_dtype == QDtype::kFp8E4m3, "decode: q_dtype (", int(q_dtype),
          ") is not one of kBFloat16, kFp8E4m3");
  require(q_dtype == QDtype::kBFloat16 || c.kv_dtype != KvDtype::kBFloat16,
          "decode: q_dtype kFp8E4m3 needs an fp8 cache (kv_dtype kFp8E4m3 or kFp8E4m3PerBlock); the ",
          kv_dtype_name(c.kv_dtype), " kernel reads a bf16 Q");
  const int rows = c.heads * c.q_len;
  if (c.kv_dtype == KvDtype::kBFloat16) return QPath::kBf16;
  if (q_dtype == QDtype::kFp8E4m3) return QPath::kCallerE4m3;
  if (c.kv_dtype == KvDtype::kFp8E4m3PerBlock) {
    // The narrow per-block kernel quantises in its consumers, the split-role one in its P V
    // warpgroups (their row scales in its unused own-P buffers; bench/NOTES.md v52); the
    // alternating kernel's wide form has no shared memory left for the row scales (v27).
    const bool narrow = sm90::fp8_block_narrow(rows, P.host.shape.cluster_size);
    const bool split = sm90::fp8_block_split_kernel_wanted(kernel_choice_params(P));
    return (narrow || split) && fp8_quantises_q_in_kernel(P, rows) ? QPath::kInline : QPath::kQuantiserKernel;
  }
  if (fp8_stages_q_in_kernel(P)) return QPath::kStaged;
  if (fp8_quantises_q_in_kernel(P, rows)) return QPath::kInline;
  return QPath::kQuantiserKernel;
}

sm90::DecodeParams kernel_choice_params(const DevicePlan::Impl& P) {
  const DecodeConfig& c = P.config;
  sm90::DecodeParams p{};
  p.q_len = c.q_len;
  p.heads = c.heads;
  p.rows = c.heads * c.q_len;
  p.d_qk = c.d_qk;
  p.tile_rows = P.host.shape.tile_rows;
  p.cluster_size = P.host.shape.cluster_size;
  p.page_size = c.page_size;
  p.page_log2 = __builtin_ctz(unsigned(c.page_size));  // a power of two (validate_config)
  p.gather_rows = gathers_rows(c);
  p.cta_rows = sm90::kRowsPerCta;
  if (p.cluster_size > 1) {
    const bool split_pv_follows_rows =
        c.kv_dtype == KvDtype::kFp8E4m3 && p.d_qk == sm90::kDqk && sm90::fp8_split_kernel_wanted(p);
    p.cta_rows = sm90::cluster_cta_rows(p, split_pv_follows_rows);
  }
  return p;
}

void record_split_requests(DevicePlan::Impl& P) {
  const HostPlan& h = P.host;
  P.split_requests.clear();
  P.max_wide_splits = 0;
  for (int b = 0; b < h.shape.batch; ++b) {
    if (h.num_splits[b] <= kCombineNarrowSplits) continue;
    P.split_requests.push_back(b);
    P.max_wide_splits = std::max(P.max_wide_splits, h.num_splits[b]);
  }
  P.num_wide_requests = int(P.split_requests.size());
  for (int b = 0; b < h.shape.batch; ++b) {
    if (h.num_splits[b] > 1 && h.num_splits[b] <= kCombineNarrowSplits) P.split_requests.push_back(b);
  }
}

// Early merges (combine.hpp): work-list plans, unless KBMLA_EARLY_COMBINE=never
// (comparisons). The static policies keep the grid wait, and so do two kinds of host plan
// (bench/NOTES.md v48): those whose every item is a piece of a split request (B1, B4_Sq4,
// one long request), whose requests complete only as CTAs end, the last at the decode's end,
// while each flag delays its CTA's exit by a fence (the likely cause, not timed alone: they
// measured 0.5-2 % slower on fp8 B1 and per-block B4_Sq4, where skew and Kimi's lognormal
// batch gained 1-5 %); and those whose merge grid
// is more than one wave, where blocks that launch early and wait for late requests hold SM
// slots the ready ones need (Kimi's 96-head lognormal batch: its merges +4 us). Device-made
// plans keep the grid wait too: their merge grid is sized by capacity (528 blocks of 16
// warps, two waves, for most batches), whether their requests are pieces only is known only
// on the device, and early merges were not measured there.
bool early_merges_wanted(const DevicePlan::Impl& P, const CombineParams& cp) {
  if (P.options.policy != Policy::kWorkList || !sm90::env_switch_not_never("KBMLA_EARLY_COMBINE")) return false;
  if (P.device_planned) return false;
  const PlanCounts& c = P.host.counts;
  return c.num_pieces > c.num_slots && combine_fits_one_wave(cp);
}

CombineParams combine_plan_params(const DevicePlan::Impl& P) {
  const HostPlan& h = P.host;
  CombineParams cp{};
  cp.batch = h.shape.batch;
  cp.q_len = P.config.q_len;
  cp.heads = P.config.heads;
  cp.rows = P.config.heads * P.config.q_len;
  cp.tile_rows = h.shape.tile_rows;
  // The decode epilogues: fp32 partials from the bf16-cache kernel, bf16 from the fp8 ones.
  cp.partial_format = P.config.kv_dtype == KvDtype::kBFloat16 ? PartialFormat::kFp32 : PartialFormat::kBf16;
  cp.splits = P.splits;
  cp.split_requests = P.split_requests_dev;
  cp.num_split_requests = int(P.split_requests.size());
  cp.num_wide_requests = P.num_wide_requests;
  cp.max_wide_splits = P.max_wide_splits;
  // A batch-invariant plan sums its wide merges as 16 virtual warps: a block's warps stride
  // over the splits and their sums add up warp by warp, so the order of the sums (and the
  // bits) would otherwise follow the widest request of the batch (4, 8 or 16 warps,
  // with_combine_warps), not the request's own splits (GpuBatchInvariance failed on a
  // 69-split request beside a 127-split one, bench/NOTES.md v55). Narrow requests are summed
  // split by split in any plan.
  cp.invariant_order = P.options.batch_invariant_split_blocks > 0;
  cp.sm_count = P.device_sm_count;
  cp.zero_fill = P.zero_fill;
  cp.num_zero_fill = int(h.zero_fill.size());
  cp.header = nullptr;
  if (P.device_planned) {  // capacities size the grid; the header has the counts
    cp.num_wide_requests = int(P.capacity.split_requests);
    cp.num_split_requests = 2 * int(P.capacity.split_requests);
    cp.num_zero_fill = int(P.capacity.zero_fill);
    cp.max_wide_splits = kMaxSplitsPerRequest;
    cp.header = P.header;
  }
  return cp;
}

}  // namespace detail

int combine_timeline_blocks(const DevicePlan& plan) {
  return int(combine_blocks(detail::combine_plan_params(plan.impl())));
}

int timeline_ctas(const DevicePlan& plan) {
  const DevicePlan::Impl& P = plan.impl();
  const HostPlan& h = P.host;
  switch (P.options.policy) {
    case Policy::kWorkList:
      return h.counts.num_active_clusters * h.shape.cluster_size;
    case Policy::kStatic:
      return h.shape.cluster_size * h.shape.batch * h.counts.num_q_tiles * P.options.static_splits;
    case Policy::kStaticPersistent:
      return static_persistent_ctas(P);
  }
  return 0;
}

}  // namespace kbmla
