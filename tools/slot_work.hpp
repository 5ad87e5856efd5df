// Per cluster slot of a host work-list plan: the terms of the planner's cost model (items,
// their KV blocks, the items that are pieces of split requests). `kbmla plan --json` prints
// them per slot and `kbmla bench --balance` beside each CTA's busy interval, so that the
// model can be fitted against measured busy times (bench/fit_costs.py).
#pragma once

#include <cstdint>
#include <vector>

#include "kbmla/planner.hpp"

namespace kbmla::tools {

struct SlotWork {
  int64_t items = 0;
  int64_t blocks = 0;       // split bounds, not clipped to causal visibility
  int64_t split_items = 0;  // items of requests cut into several pieces
};

// One entry per active slot (0 .. counts.num_active_clusters - 1) of a work-list plan.
std::vector<SlotWork> slot_work(const HostPlan& plan);

}  // namespace kbmla::tools
