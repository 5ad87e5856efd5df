#include "kbmla/static_baseline.hpp"

#include <algorithm>
#include <functional>
#include <queue>

#include "kbmla/error.hpp"
#include "kbmla/planner.hpp"
#include "kbmla/schedulers.hpp"

namespace kbmla {

namespace {

int64_t static_item_cost(const PlanShape& p, std::span<const int32_t> seqlens, const WorkTileInfo& w,
                         int split_kv, int num_tiles) {
  plan_detail::RequestInfo r = plan_detail::request_info(p, seqlens[w.batch], num_tiles);
  int64_t blocks = 0;
  if (r.blocks > 0 && w.q_tile >= r.first_tile) {
    int chunk = (r.blocks + split_kv - 1) / split_kv;
    int begin = std::min(r.blocks, w.split * chunk);
    int end = std::min(r.blocks, begin + chunk);
    blocks = end - begin;
  }
  int64_t cost = p.cost.per_item + blocks * p.cost.per_kv_block;
  if (split_kv > 1 && blocks > 0) cost += p.cost.per_split;
  return cost;
}

}  // namespace

std::vector<int64_t> static_split_cluster_costs(const PlanShape& shape, std::span<const int32_t> seqlens,
                                                int split_kv, bool persistent) {
  validate_plan_shape(shape);
  require(split_kv >= 1 && split_kv <= kMaxSplitsPerRequest, "static split: split_kv (", split_kv,
          ") must be in 1..", kMaxSplitsPerRequest);
  require(seqlens.size() == static_cast<size_t>(shape.batch), "static split: seqlens has ", seqlens.size(),
          " entries, batch is ", shape.batch);
  const int num_tiles = (shape.heads * shape.q_len + shape.tile_rows - 1) / shape.tile_rows;
  const int G = shape.num_ctas / shape.cluster_size;
  // The emulation follows cluster slots, so it runs the scheduler with a cluster of 1.
  StaticTileSchedulerParams params(persistent, shape.batch, num_tiles, 1, split_kv);
  std::vector<int64_t> costs(G, 0);
  if (persistent) {
    GridShape grid = StaticTileScheduler::grid_shape(params, G);
    for (int g = 0; g < grid.x; ++g) {
      StaticTileScheduler sched(params, g, 0, 0, 0, grid.x);
      for (WorkTileInfo w = sched.initial_work(); w.valid; sched.advance(), w = sched.current_work()) {
        costs[g] += static_item_cost(shape, seqlens, w, split_kv, num_tiles);
      }
    }
    return costs;
  }
  GridShape grid = StaticTileScheduler::grid_shape(params, G);
  using Slot = std::pair<int64_t, int>;  // (busy until, slot)
  std::priority_queue<Slot, std::vector<Slot>, std::greater<>> free_at;
  for (int g = 0; g < G; ++g) free_at.push({0, g});
  for (int z = 0; z < grid.z; ++z) {
    for (int y = 0; y < grid.y; ++y) {
      StaticTileScheduler sched(params, 0, 0, y, z, 1);
      int64_t cost = static_item_cost(shape, seqlens, sched.initial_work(), split_kv, num_tiles);
      auto [t, g] = free_at.top();
      free_at.pop();
      costs[g] += cost;
      free_at.push({t + cost, g});
    }
  }
  return costs;
}

StaticSweepResult best_static_split(const PlanShape& shape, std::span<const int32_t> seqlens, bool persistent,
                                    int max_split_kv) {
  require(max_split_kv >= 1 && max_split_kv <= kMaxSplitsPerRequest, "static sweep: max_split_kv (",
          max_split_kv, ") must be in 1..", kMaxSplitsPerRequest);
  StaticSweepResult best{0, {}};
  int64_t best_max = INT64_MAX;
  for (int s = 1; s <= max_split_kv; ++s) {
    std::vector<int64_t> costs = static_split_cluster_costs(shape, seqlens, s, persistent);
    int64_t m = *std::max_element(costs.begin(), costs.end());
    if (m < best_max) {
      best_max = m;
      best = {s, std::move(costs)};
    }
  }
  return best;
}

HostPlan make_static_plan(const PlanShape& shape, std::span<const int32_t> seqlens, int split_kv) {
  validate_plan_shape(shape);
  require(split_kv >= 1 && split_kv <= kMaxSplitsPerRequest, "static plan: split_kv (", split_kv, ") must be in 1..",
          kMaxSplitsPerRequest);
  require(seqlens.size() == static_cast<size_t>(shape.batch), "static plan: seqlens has ", seqlens.size(),
          " entries, batch is ", shape.batch);
  HostPlan plan;
  plan.shape = shape;
  PlanCounts& c = plan.counts;
  c.num_q_tiles = (shape.heads * shape.q_len + shape.tile_rows - 1) / shape.tile_rows;
  c.num_clusters = shape.num_ctas / shape.cluster_size;
  plan.num_splits.assign(shape.batch, 0);
  plan.first_slot.assign(shape.batch, -1);
  plan.bounds_offset.assign(shape.batch, 0);
  for (int b = 0; b < shape.batch; ++b) {
    require(seqlens[b] >= 0, "static plan: seqlens[", b, "] = ", seqlens[b], " must be >= 0");
    plan_detail::RequestInfo r = plan_detail::request_info(shape, seqlens[b], c.num_q_tiles);
    plan.bounds_offset[b] = int(plan.bounds.size());
    const int zero_tiles = r.tiles == 0 ? c.num_q_tiles : r.first_tile;
    for (int t = 0; t < zero_tiles; ++t) plan.zero_fill.push_back(make_work_entry(t, b, shape.batch, 0));
    if (r.tiles == 0) continue;
    plan.num_splits[b] = split_kv;
    if (split_kv > 1) {
      plan.first_slot[b] = c.num_slots;
      c.num_slots += split_kv;
    }
    const int chunk = (r.blocks + split_kv - 1) / split_kv;
    for (int s = 0; s <= split_kv; ++s) plan.bounds.push_back(std::min(r.blocks, s * chunk));
    c.num_items += r.tiles * split_kv;
    c.num_pieces += split_kv;
  }
  c.num_bounds = int(plan.bounds.size());
  c.num_zero_fill = int(plan.zero_fill.size());
  plan.cluster_cost = static_split_cluster_costs(shape, seqlens, split_kv, false);
  return plan;
}

CostStats cost_stats(std::span<const int64_t> costs) {
  require(!costs.empty(), "cost_stats: no costs");
  CostStats s{costs[0], costs[0], 0.0};
  double sum = 0;
  for (int64_t c : costs) {
    s.min = std::min(s.min, c);
    s.max = std::max(s.max, c);
    sum += static_cast<double>(c);
  }
  s.mean = sum / static_cast<double>(costs.size());
  return s;
}

}  // namespace kbmla
