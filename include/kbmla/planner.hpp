// Host planner: validates a plan request with clear errors and runs the planner core
// (planner_core.hpp, planner_search.hpp) into owned host buffers. Plan once per decode
// step; every layer of the step reuses the plan.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kbmla/planner_search.hpp"
#include "kbmla/work_format.hpp"

namespace kbmla {

struct HostPlan {
  PlanShape shape;
  PlanCounts counts;
  std::vector<int32_t> work_list;      // [counts.work_list_len]
  std::vector<int32_t> num_splits;     // [batch]
  std::vector<int32_t> first_slot;     // [batch]
  std::vector<int32_t> bounds_offset;  // [batch]
  std::vector<int32_t> bounds;         // [counts.num_bounds]
  std::vector<int32_t> zero_fill;      // [counts.num_zero_fill]
  std::vector<int64_t> cluster_cost;   // [counts.num_clusters], the cost model's load per slot

  // Bytes of workspace the decode needs for this plan (partials of split requests).
  size_t workspace_bytes(int d_v) const;
};

// Throws kbmla::Error naming the field, its value and the allowed range.
void validate_plan_shape(const PlanShape& shape);

// Throws on an invalid shape, a negative seqlen, or seqlens.size() != shape.batch.
HostPlan make_host_plan(const PlanShape& shape, std::span<const int32_t> seqlens);

// Upper bound of partial-output slots for any seqlens at this shape: 2 (G - 1), G the
// cluster slots (every split request's extra pieces come from cuts between slots).
int64_t max_partial_slots(const PlanShape& shape);

// Capacities that hold the plan of any seqlens at this shape (device planning).
struct PlanCapacity {
  int64_t work_list;       // G * (T * B + 1): a slot holds at most one piece of each request
  int64_t bounds;          // 2B + G - 1: at most B + G - 1 pieces, plus one bound per request
  int64_t zero_fill;       // T * B
  int64_t split_requests;  // G - 1: each split request holds at least one cut between slots
  int64_t partial_slots;   // 2 (G - 1)
};
PlanCapacity plan_capacity(const PlanShape& shape);

}  // namespace kbmla
