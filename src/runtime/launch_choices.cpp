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
// fp8_split_roles), from the DecodeParams fields that predicate reads, set as
// decode_with_mode sets them for requests of more than 16 rows (parts of min(page, 64)
// tokens, the row gather below 8-token pages, the plan's cluster size).
bool per_tensor_split_kernel(const DevicePlan::Impl& P) {
  const DecodeConfig& c = P.config;
  sm90::DecodeParams p{};
  p.cluster_size = P.host.shape.cluster_size;
  p.rows = c.heads * c.q_len;
  p.d_qk = c.d_qk;
  p.gather_rows = gathers_rows(c);
  p.part_log2 = std::min(__builtin_ctz(unsigned(c.page_size)), 6);
  return c.kv_dtype == KvDtype::kFp8E4m3 && sm90::fp8_split_kernel_wanted(p);
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

CombineParams combine_plan_params(const DevicePlan::Impl& P) {
  const HostPlan& h = P.host;
  CombineParams cp{};
  cp.batch = h.shape.batch;
  cp.q_len = P.config.q_len;
  cp.heads = P.config.heads;
  cp.rows = P.config.heads * P.config.q_len;
  cp.tile_rows = h.shape.tile_rows;
  cp.splits = P.splits;
  cp.split_requests = P.split_requests_dev;
  cp.num_split_requests = int(P.split_requests.size());
  cp.num_wide_requests = P.num_wide_requests;
  cp.max_wide_splits = P.max_wide_splits;
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
