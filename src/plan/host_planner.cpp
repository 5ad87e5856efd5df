#include "kbmla/planner.hpp"

#include <algorithm>
#include <vector>

#include "kbmla/error.hpp"
#include "src/plan/staged_batch.hpp"

namespace kbmla {

namespace {

// plan_measure's counts, its cut-form probes by the slot walk (slot_walk.hpp; the whole
// form and batch-invariant cuts by fill()): the same verdicts and counts at every cap
// (SlotWalk tests), so the same search and plan, in fewer steps where requests outnumber
// slots (one cut-form fill at the plan's cap, lognormal batch of 2048: 18.7 us by fill(),
// 3.5 by the walk). make_host_plan at lognormal batches (this 2-core machine, -O3):
// B512 107 -> 82-85 us, B2048 320-339 -> 175-210. Below two requests a slot the walk's
// set-up (terms, prefix sums) costs about what it saves (B128: 36 us against 31), and
// plan_measure runs.
PlanCounts measure_by_walk(const PlanShape& p, std::span<const int32_t> seqlens) {
  using namespace plan_detail;
  const int T = ceil_div(p.heads * p.q_len, p.tile_rows);
  const int G = p.num_ctas / p.cluster_size;
  const StagedBatch st(p, seqlens, T);
  if (st.bad_index >= 0) {
    PlanCounts failed;
    failed.num_q_tiles = T;
    failed.num_clusters = G;
    failed.status = kPlanNegativeSeqlen;
    failed.bad_index = st.bad_index;
    return failed;
  }
  const BatchPrefix pre = st.prefix();
  const StagedRequests reqs = st.requests(seqlens);
  const int zero_total = st.zero[p.batch];
  return plan_search(p, st.whole[p.batch], st.max_tile_cost, SequentialProbes{}, [&](int64_t cap, bool whole_form,
                                                                                      PlanCounts& c) {
    if (whole_form || p.fixed_split_blocks > 0) {
      CountSink sink(&c);
      return fill(p, reqs, T, G, cap, whole_form, sink);
    }
    WalkCounter counter{pre, c, p.batch};
    const bool ok = walk_cut(p, reqs, pre, G, cap, BinarySearch{}, counter);
    c = counter.counts;
    c.num_zero_fill = zero_total;
    return ok;
  });
}

}  // namespace

void validate_plan_shape(const PlanShape& s) {
  require(s.batch >= 1, "plan: batch (", s.batch, ") must be >= 1");
  require(s.q_len >= 1, "plan: q_len (", s.q_len, ") must be >= 1");
  require(s.tile_rows >= 1, "plan: tile_rows (", s.tile_rows, ") must be >= 1");
  require(s.heads >= 1 && s.heads <= s.tile_rows, "plan: heads (", s.heads, ") must be in 1..", s.tile_rows,
          " (one q tile of tile_rows ", s.tile_rows, " must hold all heads of a token)");
  require(s.cluster_size >= 1 && s.tile_rows % s.cluster_size == 0, "plan: cluster_size (", s.cluster_size,
          ") must be >= 1 and divide tile_rows (", s.tile_rows, ")");
  require(s.kv_block >= 1, "plan: kv_block (", s.kv_block, ") must be >= 1 token");
  require(s.fixed_split_blocks >= 0, "plan: fixed_split_blocks (", s.fixed_split_blocks,
          ") must be >= 0 (0: balanced splits)");
  require(s.num_ctas >= s.cluster_size, "plan: num_ctas (", s.num_ctas, ") must be >= cluster_size (",
          s.cluster_size, ")");
  require(s.cost.per_kv_block > 0 && s.cost.per_item > 0 && s.cost.per_split > 0,
          "plan: cost model constants must be positive, got per_kv_block ", s.cost.per_kv_block, ", per_item ",
          s.cost.per_item, ", per_split ", s.cost.per_split);
  require(s.cost.per_kv_block <= (int64_t{1} << 32) && s.cost.per_item <= (int64_t{1} << 32) &&
              s.cost.per_split <= (int64_t{1} << 32),
          "plan: cost model constants must be <= 2^32 so costs stay in 64 bits");
  const int64_t rows = int64_t{s.heads} * s.q_len;
  const int64_t tiles = (rows + s.tile_rows - 1) / s.tile_rows;
  require(rows <= (int64_t{1} << 24), "plan: heads * q_len (", rows, ") must be <= 2^24");
  require(tiles * s.batch <= kMaxTileBatchIndex, "plan: q tiles (", tiles, ") x batch (", s.batch,
          ") must be <= 2^23 for the work-list entry encoding");
}

int64_t max_partial_slots(const PlanShape& s) {
  validate_plan_shape(s);
  return 2 * int64_t{s.num_ctas / s.cluster_size - 1};
}

PlanCapacity plan_capacity(const PlanShape& s) {
  validate_plan_shape(s);
  const int64_t G = s.num_ctas / s.cluster_size;
  const int64_t T = (int64_t{s.heads} * s.q_len + s.tile_rows - 1) / s.tile_rows;
  PlanCapacity c;
  c.work_list = G * (T * s.batch + 1);
  c.bounds = 2 * int64_t{s.batch} + G - 1;
  c.zero_fill = T * s.batch;
  c.split_requests = std::max<int64_t>(G - 1, 0);
  c.partial_slots = 2 * std::max<int64_t>(G - 1, 0);
  require(c.work_list <= INT32_MAX, "plan capacity: the work list for batch ", s.batch, " and ", G,
          " slots would exceed 2^31 - 1 entries");
  return c;
}

size_t HostPlan::workspace_bytes(int d_v) const {
  require(d_v >= 1, "workspace_bytes: d_v (", d_v, ") must be >= 1");
  return workspace_layout(counts.num_slots, shape.heads * shape.q_len, d_v).total_bytes;
}

HostPlan make_host_plan(const PlanShape& shape, std::span<const int32_t> seqlens) {
  validate_plan_shape(shape);
  require(seqlens.size() == static_cast<size_t>(shape.batch), "plan: seqlens has ", seqlens.size(),
          " entries, batch is ", shape.batch);
  HostPlan plan;
  plan.shape = shape;
  const bool walk = shape.batch >= 2 * (shape.num_ctas / shape.cluster_size);
  plan.counts = walk ? measure_by_walk(shape, seqlens) : plan_measure(shape, seqlens.data());
  if (plan.counts.status == kPlanNegativeSeqlen) {
    int b = plan.counts.bad_index;
    throw Error(detail::concat("plan: seqlens[", b, "] = ", seqlens[b], " must be >= 0"));
  }
  require(plan.counts.status != kPlanListTooLong, "plan: the work list for batch ", shape.batch, " on ",
          plan.counts.num_clusters, " cluster slots would exceed 2^31 - 1 entries; lower num_ctas or batch");
  const PlanCounts& c = plan.counts;
  plan.work_list.assign(c.work_list_len, kNoWork);
  plan.num_splits.assign(shape.batch, 0);
  plan.first_slot.assign(shape.batch, -1);
  plan.bounds_offset.assign(shape.batch, 0);
  plan.bounds.assign(c.num_bounds, 0);
  plan.zero_fill.assign(c.num_zero_fill, kNoWork);
  plan.cluster_cost.assign(c.num_clusters, 0);
  PlanBuffers buffers;
  buffers.work_list = plan.work_list.data();
  buffers.work_list_capacity = c.work_list_len;
  buffers.num_splits = plan.num_splits.data();
  buffers.first_slot = plan.first_slot.data();
  buffers.bounds_offset = plan.bounds_offset.data();
  buffers.bounds = plan.bounds.data();
  buffers.bounds_capacity = c.num_bounds;
  buffers.zero_fill = plan.zero_fill.data();
  buffers.zero_fill_capacity = c.num_zero_fill;
  buffers.cluster_cost = plan.cluster_cost.data();
  int status = plan_write(shape, seqlens.data(), c, buffers);
  require(status == kPlanOk, "plan: internal error, plan_write returned status ", status);
  return plan;
}

}  // namespace kbmla
