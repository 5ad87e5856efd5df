// Invariants every plan must satisfy, checked from the outside (the scheduler's walk,
// intervals per (q tile, request)); returns "" or a description of the first violation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kbmla/error.hpp"
#include "kbmla/planner.hpp"
#include "kbmla/schedulers.hpp"

namespace kbmla::test {

// A plan's tables in vectors, for comparing the writes of two ways of planning: sized for
// the counts, every entry but the work list's poisoned (-7); the cluster costs only where
// asked for.
struct PlanTables {
  std::vector<int32_t> work_list, num_splits, first_slot, bounds_offset, bounds, zero_fill;
  std::vector<int64_t> cluster_cost;
  PlanBuffers buffers(const PlanCounts& c, int batch, bool with_cluster_cost = false) {
    work_list.assign(c.work_list_len, kNoWork);
    num_splits.assign(batch, -7);
    first_slot.assign(batch, -7);
    bounds_offset.assign(batch, -7);
    bounds.assign(c.num_bounds, -7);
    zero_fill.assign(c.num_zero_fill, -7);
    cluster_cost.assign(with_cluster_cost ? c.num_clusters : 0, -7);
    return {work_list.data(), int(work_list.size()), num_splits.data(), first_slot.data(), bounds_offset.data(),
            bounds.data(),    int(bounds.size()),    zero_fill.data(),  int(zero_fill.size()),
            with_cluster_cost ? cluster_cost.data() : nullptr};
  }
  bool operator==(const PlanTables&) const = default;
};

// The sm_90 kernel's plan shape: 64 rows per CTA, 2-CTA clusters above 64 rows.
inline PlanShape sm90_shape(int batch, int q_len, int heads, int ctas = 132) {
  PlanShape s;
  s.batch = batch;
  s.q_len = q_len;
  s.heads = heads;
  s.cluster_size = heads * q_len > 64 ? 2 : 1;
  s.tile_rows = 64 * s.cluster_size;
  s.num_ctas = ctas;
  return s;
}

inline int visible_first_tile(const PlanShape& s, int L, int tiles) {
  // Independent of the planner: scan rows for the first one that sees a key.
  const int rows = s.heads * s.q_len;
  for (int r = 0; r < rows; ++r) {
    const int token = r / s.heads;
    const int keys = s.causal ? L - s.q_len + token + 1 : L;
    if (keys > 0 && L > 0) return r / s.tile_rows;
  }
  return tiles;
}

// Cost of the largest atomic piece of the plan: one split of one request with all its
// q tiles (they always go to the same slot). The balance bar is
// max <= max(1.05 mean, mean + this): no slot carries more than one piece above the mean.
inline int64_t largest_piece_cost(const PlanShape& s, std::span<const int32_t> seqlens, const HostPlan& plan) {
  const int tiles = (s.heads * s.q_len + s.tile_rows - 1) / s.tile_rows;
  int64_t worst = 0;
  for (int b = 0; b < s.batch; ++b) {
    const int ns = plan.num_splits[b];
    const int64_t nt = tiles - visible_first_tile(s, seqlens[b], tiles);
    for (int k = 0; k < ns; ++k) {
      const int64_t blocks = plan.bounds[plan.bounds_offset[b] + k + 1] - plan.bounds[plan.bounds_offset[b] + k];
      worst = std::max(worst, nt * (blocks * s.cost.per_kv_block + s.cost.per_item + (ns > 1 ? s.cost.per_split : 0)));
    }
  }
  return worst;
}

inline std::string plan_violation(const PlanShape& s, std::span<const int32_t> seqlens, const HostPlan& plan) {
  using detail::concat;
  const int B = s.batch;
  const int tiles = (s.heads * s.q_len + s.tile_rows - 1) / s.tile_rows;
  const int G = s.num_ctas / s.cluster_size;
  const auto& c = plan.counts;
  if (c.num_q_tiles != tiles || c.num_clusters != G) return "counts disagree with the shape";
  const int A = c.num_active_clusters;
  if (A > G) return "more active slots than slots";
  if (plan.work_list.size() != size_t(A) * (c.max_items_per_cluster + 1)) return "work list length";
  for (int g = A; g < G; ++g) {
    if (plan.cluster_cost[g] != 0) return concat("slot ", g, " past the active ones has cost");
  }

  // Walk the list exactly as the seed's scheduler does, for every CTA of the grid.
  struct Item { int begin, end; };
  std::vector<std::vector<Item>> by_tile_request(size_t(tiles) * B);
  std::vector<int64_t> walked_cost(G, 0);
  StaticTileSchedulerParams params(true, B, tiles, s.cluster_size, 1);
  const int grid = A * s.cluster_size;
  int items = 0;
  for (int cta = 0; cta < grid; ++cta) {
    WorkListTileScheduler sched(params, plan.work_list.data(), cta, grid);
    for (int idx = cta;; idx += grid) {
      if (size_t(idx / s.cluster_size) >= plan.work_list.size()) return concat("CTA ", cta, " walked off the list");
      WorkTileInfo w = sched.current_work();
      sched.advance();
      if (!w.valid) break;
      if (w.cta_in_cluster != cta % s.cluster_size) return "cta_in_cluster";
      if (w.batch < 0 || w.batch >= B || w.q_tile < 0 || w.q_tile >= tiles) return "item out of range";
      const int ns = plan.num_splits[w.batch];
      if (w.split >= ns) return concat("split ", w.split, " >= num_splits ", ns, " of request ", w.batch);
      const int off = plan.bounds_offset[w.batch];
      const int b0 = plan.bounds[off + w.split], b1 = plan.bounds[off + w.split + 1];
      if (b1 <= b0) return concat("empty split ", w.split, " of request ", w.batch);
      if (cta % s.cluster_size == 0) {
        by_tile_request[size_t(w.q_tile) * B + w.batch].push_back({b0, b1});
        walked_cost[cta / s.cluster_size] +=
            int64_t{b1 - b0} * s.cost.per_kv_block + s.cost.per_item + (ns > 1 ? s.cost.per_split : 0);
        ++items;
      }
    }
  }
  if (items != c.num_items) return concat("walked ", items, " items, counts say ", c.num_items);
  for (int g = 0; g < G; ++g) {
    if (walked_cost[g] != plan.cluster_cost[g]) return concat("slot ", g, " cost ", walked_cost[g], " vs ", plan.cluster_cost[g]);
  }

  // Coverage: each (tile, request) with a visible key is covered by its splits exactly once.
  int slots = 0, zero_expected = 0;
  std::vector<char> zero_listed(size_t(tiles) * B, 0);
  for (int32_t e : plan.zero_fill) {
    if (e < 0 || work_entry_split(e) != 0) return "bad zero-fill entry";
    const int tb = work_entry_tile_batch(e);
    if (tb >= tiles * B) return "zero-fill entry out of range";
    if (zero_listed[size_t(tb)]++) return "zero-fill entry twice";
  }
  for (int b = 0; b < B; ++b) {
    const int L = seqlens[b];
    const int nb = (L + s.kv_block - 1) / s.kv_block;
    const int t0 = visible_first_tile(s, L, tiles);
    const int ns = plan.num_splits[b];
    if (nb == 0 && ns != 0) return concat("request ", b, " is empty but has ", ns, " splits");
    if (nb > 0 && (ns < 1 || ns > std::min(nb, kMaxSplitsPerRequest))) {
      return concat("request ", b, ": ", ns, " splits for ", nb, " blocks (allowed 1..min(blocks, 256))");
    }
    if ((ns > 1) != (plan.first_slot[b] >= 0)) return concat("request ", b, " first_slot ", plan.first_slot[b]);
    if (ns > 1) slots += ns;
    for (int t = 0; t < tiles; ++t) {
      auto& v = by_tile_request[size_t(t) * B + b];
      const bool listed = zero_listed[size_t(t) * B + b];
      if (t < t0 || nb == 0) {
        ++zero_expected;
        if (!listed) return concat("tile ", t, " of request ", b, " sees no key but is not zero-filled");
        if (!v.empty()) return concat("tile ", t, " of request ", b, " sees no key but has items");
        continue;
      }
      if (listed) return concat("tile ", t, " of request ", b, " has keys but is zero-filled");
      if (int(v.size()) != ns) return concat("tile ", t, " of request ", b, ": ", v.size(), " items for ", ns, " splits");
      std::sort(v.begin(), v.end(), [](Item x, Item y) { return x.begin < y.begin; });
      int at = 0;
      for (Item it : v) {
        if (it.begin != at) return concat("tile ", t, " of request ", b, ": gap or overlap at block ", at);
        at = it.end;
      }
      if (at != nb) return concat("tile ", t, " of request ", b, ": covered to block ", at, " of ", nb);
    }
  }
  if (slots != c.num_slots) return "slot count";
  if (zero_expected != c.num_zero_fill) return "zero-fill count";
  // Balanced plans cut only at slot boundaries; batch-invariant ones cut by length.
  if (s.fixed_split_blocks == 0 && c.num_slots > 2 * (G - 1)) {
    return concat("slots ", c.num_slots, " above the bound 2(G-1)");
  }
  return "";
}

}  // namespace kbmla::test
