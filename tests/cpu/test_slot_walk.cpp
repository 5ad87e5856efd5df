// The device planner's slot walk (src/plan/slot_walk.hpp) against fill(), the host
// planner's fill and the oracle: over random shapes, batches and caps (the least fitting
// cap, its neighbours, and caps across the whole range), the same verdict and, where
// everything fits, the same counts; at the planner's cap the same bytes written, with one
// writer and with four interleaved ones (as lanes of a warp split the runs), request by
// request from the steps a counting walk recorded (cut form) and unit by unit from each
// slot's first unit (whole form).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kbmla/planner.hpp"
#include "src/plan/staged_batch.hpp"
#include "tests/cpu/plan_checks.hpp"

namespace kbmla {
namespace {

using namespace plan_detail;

std::vector<int32_t> walk_seqlens(std::mt19937_64& rng, int batch) {
  std::uniform_int_distribution<int> mix(0, 3), any(0, 1 << 20), small(0, 300);
  std::vector<int32_t> s(batch);
  const int kind = mix(rng);
  for (auto& x : s) {
    if (kind == 0) x = any(rng) >> std::uniform_int_distribution<int>(4, 14)(rng);
    if (kind == 1) x = small(rng) < 30 ? 0 : small(rng);  // short, with empty requests
    if (kind == 2) x = int32_t(std::min(1.0e6, std::lognormal_distribution<double>(7.0, 1.8)(rng)));
    if (kind == 3) x = small(rng) < 15 ? any(rng) : std::uniform_int_distribution<int>(0, 9)(rng);  // q_len edge
  }
  return s;
}

struct Walked {
  bool ok;
  PlanCounts counts;
};

Walked walk_counts(const PlanShape& p, const StagedRequests& reqs, const StagedBatch& st, int T, int G, int64_t cap,
                   bool whole) {
  PlanCounts c;
  c.num_q_tiles = T;
  c.num_clusters = G;
  const BatchPrefix pre = st.prefix();
  WalkCounter counter{pre, c, p.batch};
  const bool ok = whole ? walk_whole(p, pre, T, G, cap, BinarySearch{}, counter)
                        : walk_cut(p, reqs, pre, G, cap, BinarySearch{}, counter);
  c = counter.counts;
  if (whole) {
    c.num_pieces = st.work[p.batch];
    c.num_bounds = 2 * st.work[p.batch];
  }
  c.num_zero_fill = st.zero[p.batch];
  return {ok, c};
}

Walked fill_counts(const PlanShape& p, const StagedRequests& reqs, int T, int G, int64_t cap, bool whole) {
  PlanCounts c;
  c.num_q_tiles = T;
  c.num_clusters = G;
  CountSink sink(&c);
  const bool ok = fill(p, reqs, T, G, cap, whole, sink);
  return {ok, c};
}

void expect_same_counts(const PlanCounts& a, const PlanCounts& b, const std::string& where) {
  EXPECT_EQ(a.num_active_clusters, b.num_active_clusters) << where;
  EXPECT_EQ(a.max_items_per_cluster, b.max_items_per_cluster) << where;
  EXPECT_EQ(a.num_items, b.num_items) << where;
  EXPECT_EQ(a.num_pieces, b.num_pieces) << where;
  EXPECT_EQ(a.num_bounds, b.num_bounds) << where;
  EXPECT_EQ(a.num_slots, b.num_slots) << where;
  EXPECT_EQ(a.num_zero_fill, b.num_zero_fill) << where;
}

using test::PlanTables;

// The walk's writes (lanes writers, each walking with its own copy of the state) plus the
// caller's parts, as the device planner makes them.
PlanTables walk_write(const PlanShape& p, const StagedRequests& reqs, const StagedBatch& st, const PlanCounts& c, int lanes) {
  PlanTables t;
  PlanBuffers out = t.buffers(c, p.batch);
  const BatchPrefix pre = st.prefix();
  for (int b = 0; b < p.batch; ++b) zero_fill_request(p, reqs, c.num_q_tiles, out, st.zero[b], b);
  if (c.whole_requests) {
    for (int b = 0; b < p.batch; ++b) whole_form_request(reqs, pre, out, nullptr, b);
  }
  for (int lane = 0; lane < lanes; ++lane) {
    WalkWriter<StagedRequests> w{&p, reqs, pre, c.num_active_clusters, out, nullptr, lane, lanes, c.num_q_tiles};
    const bool ok = c.whole_requests ? walk_whole(p, pre, c.num_q_tiles, c.num_clusters, c.cap, BinarySearch{}, w)
                                     : walk_cut(p, reqs, pre, c.num_clusters, c.cap, BinarySearch{}, w);
    EXPECT_TRUE(ok);
  }
  return t;
}

// The cut form's writes request by request from the steps a counting walk recorded.
PlanTables step_write(const PlanShape& p, const StagedRequests& reqs, const StagedBatch& st, const PlanCounts& c) {
  PlanTables t;
  PlanBuffers out = t.buffers(c, p.batch);
  const BatchPrefix pre = st.prefix();
  std::vector<CutStep> steps(c.num_clusters + 1);
  PlanCounts counted;
  WalkCounter counter{pre, counted, p.batch, steps.data(), int(steps.size())};
  EXPECT_TRUE(walk_cut(p, reqs, pre, c.num_clusters, c.cap, BinarySearch{}, counter));
  EXPECT_LE(counter.num_steps, c.num_clusters + 1);
  for (int b = p.batch - 1; b >= 0; --b) {  // (any order: the requests' writes are independent)
    zero_fill_request(p, reqs, c.num_q_tiles, out, st.zero[b], b);
    write_request_from_steps(p, reqs, pre, steps.data(), counter.num_steps, c.num_clusters, c.cap,
                             c.num_active_clusters, c.num_q_tiles, out, nullptr, b);
  }
  return t;
}

// The whole form's writes unit by unit from each slot's first unit, recorded by fill()
// (SlotStartSink: the first unit placed) or by the walk (WalkCounter: the first unit of
// the slot's run, which in slot 0 may be a unit without work before it).
PlanTables unit_write(const PlanShape& p, const StagedRequests& reqs, const StagedBatch& st, const PlanCounts& c,
                  bool by_walk) {
  PlanTables t;
  PlanBuffers out = t.buffers(c, p.batch);
  const BatchPrefix pre = st.prefix();
  std::vector<int32_t> starts(c.num_clusters, -1);
  PlanCounts counted;
  int num_slots = 0;
  if (by_walk) {
    WalkCounter counter{pre, counted, p.batch};
    counter.slot_starts = starts.data();
    EXPECT_TRUE(walk_whole(p, pre, c.num_q_tiles, c.num_clusters, c.cap, BinarySearch{}, counter));
    num_slots = counter.num_steps;
  } else {
    SlotStartSink sink(&counted, starts.data(), p.batch);
    EXPECT_TRUE(fill(p, reqs, c.num_q_tiles, c.num_clusters, c.cap, true, sink));
    num_slots = sink.num_slots_used;
  }
  const UnitPrefix up(pre, p.batch);
  for (int b = 0; b < p.batch; ++b) {
    zero_fill_request(p, reqs, c.num_q_tiles, out, st.zero[b], b);
    whole_form_request(reqs, pre, out, nullptr, b);
  }
  for (int k = c.num_q_tiles * p.batch - 1; k >= 0; --k) {
    write_unit_from_starts(p, reqs, up, starts.data(), num_slots, c.num_active_clusters, out, k);
  }
  return t;
}

TEST(SlotWalk, SameVerdictsCountsAndBytesAsFill) {
  std::mt19937_64 rng(20261201);
  std::uniform_int_distribution<int> q_len_d(1, 16), heads_d(1, 128), coin(0, 3);
  int compared_caps = 0, fitting = 0, plans = 0, whole_plans = 0, step_plans = 0;
  for (int i = 0; i < 3000; ++i) {
    PlanShape p;
    p.batch = std::uniform_int_distribution<int>(1, 1 << std::uniform_int_distribution<int>(0, 9)(rng))(rng);
    p.q_len = q_len_d(rng);
    p.heads = heads_d(rng);
    p.causal = coin(rng) != 0;
    p.cluster_size = p.heads * p.q_len > 64 ? 2 : 1;
    p.tile_rows = 64 * p.cluster_size;
    p.num_ctas = coin(rng) ? 132 : std::uniform_int_distribution<int>(2, 264)(rng);
    p.cost = sm90_bf16_cost_model(p.heads * p.q_len);
    if (coin(rng) == 0) p.cost = sm90_fp8_cost_model(p.heads * p.q_len);
    p.fixed_grid = coin(rng) != 0;
    const std::vector<int32_t> seqlens = walk_seqlens(rng, p.batch);
    const int T = ceil_div(p.heads * p.q_len, p.tile_rows);
    const int G = p.num_ctas / p.cluster_size;
    const StagedBatch st(p, seqlens, T);
    const StagedRequests reqs = st.requests(seqlens);
    const PlanCounts planned = plan_measure(p, seqlens.data());
    ASSERT_EQ(planned.status, kPlanOk);
    // Caps: the planner's, its neighbours, and a spread from below the bound to far above.
    std::vector<int64_t> caps = {planned.cap - 1, planned.cap, planned.cap + 1};
    const int64_t lo = st.whole[p.batch] / G;
    for (int k = 0; k < 12; ++k) caps.push_back(lo + (lo + 100000) * k / 4 + std::uniform_int_distribution<int>(0, 999)(rng));
    for (const int64_t cap : caps) {
      for (int whole = 0; whole < 2; ++whole) {
        if (whole && !st.all_visible) continue;
        const Walked a = fill_counts(p, reqs, T, G, cap, whole);
        const Walked b = walk_counts(p, reqs, st, T, G, cap, whole);
        const std::string where = "config " + std::to_string(i) + " cap " + std::to_string(cap) + " whole " +
                                  std::to_string(whole) + " batch " + std::to_string(p.batch);
        ASSERT_EQ(a.ok, b.ok) << where;
        ++compared_caps;
        if (a.ok) {
          ++fitting;
          expect_same_counts(a.counts, b.counts, where);
        }
      }
    }
    if (planned.whole_requests && !st.all_visible) continue;
    // Bytes at the planner's cap.
    PlanTables want;
    PlanBuffers wb = want.buffers(planned, p.batch);
    ASSERT_EQ(plan_write(p, seqlens.data(), planned, wb), kPlanOk);
    for (int lanes : {1, 4}) {
      ASSERT_TRUE(walk_write(p, reqs, st, planned, lanes) == want) << "config " << i << " lanes " << lanes;
    }
    if (!planned.whole_requests) {
      ASSERT_TRUE(step_write(p, reqs, st, planned) == want) << "config " << i << " from steps";
      ++step_plans;
    } else {
      for (bool by_walk : {false, true}) {
        ASSERT_TRUE(unit_write(p, reqs, st, planned, by_walk) == want)
            << "config " << i << " from slot starts, walk " << by_walk;
      }
    }
    ++plans;
    whole_plans += planned.whole_requests ? 1 : 0;
  }
  // The comparison must have covered both verdicts and both forms.
  EXPECT_GT(fitting, compared_caps / 4);
  EXPECT_LT(fitting, compared_caps);
  EXPECT_GT(whole_plans, 100);
  EXPECT_GT(plans - whole_plans, 100);
  EXPECT_EQ(step_plans, plans - whole_plans);
}

// make_host_plan searches with the walk (host_planner.cpp): its plans must be plan_measure
// and plan_write's, byte for byte, batch-invariant cuts and custom cost models included.
TEST(SlotWalk, HostPlansEqualPlanMeasureAndWrite) {
  std::mt19937_64 rng(99);
  int whole_plans = 0;
  for (int i = 0; i < 4000; ++i) {
    PlanShape p;
    p.heads = std::uniform_int_distribution<int>(1, 128)(rng);
    p.q_len = std::uniform_int_distribution<int>(1, 16)(rng);
    p.cluster_size = p.heads * p.q_len > 64 ? 2 : 1;
    p.tile_rows = 64 * p.cluster_size;
    p.num_ctas = std::max(p.cluster_size, std::uniform_int_distribution<int>(1, 264)(rng) / p.cluster_size * p.cluster_size);
    p.causal = rng() % 4 != 0;
    p.fixed_grid = rng() % 2 != 0;
    if (rng() % 10 == 0) p.fixed_split_blocks = 8 + int(rng() % 64);
    p.cost = {int64_t(500 + rng() % 3000), int64_t(1000 + rng() % 9000), int64_t(1000 + rng() % 5000)};
    p.batch = 1 + int(rng() % (i % 5 == 0 ? 2000 : 40));
    const std::vector<int32_t> seqlens = walk_seqlens(rng, p.batch);
    const HostPlan got = make_host_plan(p, seqlens);
    const PlanCounts c = plan_measure(p, seqlens.data());
    ASSERT_EQ(c.status, kPlanOk);
    PlanTables want;
    PlanBuffers out = want.buffers(c, p.batch);
    std::vector<int64_t> cluster_cost(c.num_clusters, 0);
    out.cluster_cost = cluster_cost.data();
    ASSERT_EQ(plan_write(p, seqlens.data(), c, out), kPlanOk);
    const std::string where = "config " + std::to_string(i);
    ASSERT_EQ(got.counts.cap, c.cap) << where;
    ASSERT_EQ(got.counts.whole_requests, c.whole_requests) << where;
    expect_same_counts(got.counts, c, where);
    ASSERT_EQ(got.counts.work_list_len, c.work_list_len) << where;
    const PlanTables got_tables{got.work_list, got.num_splits, got.first_slot, got.bounds_offset, got.bounds, got.zero_fill, {}};
    ASSERT_TRUE(got_tables == want) << where;
    ASSERT_EQ(got.cluster_cost, cluster_cost) << where;
    whole_plans += c.whole_requests ? 1 : 0;
  }
  EXPECT_GT(whole_plans, 100);
  EXPECT_LT(whole_plans, 3900);
}

}  // namespace
}  // namespace kbmla
