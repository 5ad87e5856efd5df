// Cost-model emulation of the static-split policies (the seed's MLAStaticTileScheduler):
// every request gets the same split count S, split s covering blocks
// [s * ceil(nb / S), (s + 1) * ceil(nb / S)). Used by `kbmla plan` and the tests to put
// the work-list plan beside the fairest static baseline (the best S of a sweep).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kbmla/planner.hpp"

namespace kbmla {

// Per-cluster-slot cost of the static policy with `split_kv` splits.
//  persistent:     slot g takes linear tiles g, g + G, ... (seed order: q tile fastest,
//                  then batch, then split).
//  non-persistent: grid (cluster, B * T, S) dispatched in launch order to whichever slot
//                  frees first, as the hardware block scheduler does.
// Items with no KV blocks still cost per_item (the CTA launches, finds nothing, exits).
std::vector<int64_t> static_split_cluster_costs(const PlanShape& shape, std::span<const int32_t> seqlens,
                                                int split_kv, bool persistent);

struct StaticSweepResult {
  int best_split_kv;
  std::vector<int64_t> cluster_costs;
};

// The split count in 1..max_split_kv with the smallest maximum slot cost (ties: fewer
// splits).
StaticSweepResult best_static_split(const PlanShape& shape, std::span<const int32_t> seqlens, bool persistent,
                                    int max_split_kv = kMaxSplitsPerRequest);

// The split table of the static policy in the HostPlan format (work_list left empty):
// every request with work gets `split_kv` splits of ceil(nb / split_kv) blocks (the last
// ones possibly empty), so the kernel and the combine share one code path.
HostPlan make_static_plan(const PlanShape& shape, std::span<const int32_t> seqlens, int split_kv);

struct CostStats {
  int64_t min;
  int64_t max;
  double mean;
  double max_over_mean() const { return mean > 0 ? static_cast<double>(max) / mean : 1.0; }
};
CostStats cost_stats(std::span<const int64_t> costs);

}  // namespace kbmla
