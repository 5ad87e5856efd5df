// The KV-balanced planner on fixed cases: coverage, owners, walk, balance on the public
// cases, limits, determinism and input errors.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kbmla/decode.hpp"
#include "kbmla/error.hpp"
#include "kbmla/planner.hpp"
#include "kbmla/static_baseline.hpp"
#include "tests/cpu/plan_checks.hpp"

namespace kbmla {
namespace {

using test::sm90_shape;

void expect_balanced(const PlanShape& s, const std::vector<int32_t>& seqlens, const HostPlan& plan) {
  CostStats st = cost_stats(plan.cluster_cost);
  const double bound = std::max(1.05 * st.mean, st.mean + double(test::largest_piece_cost(s, seqlens, plan)));
  EXPECT_LE(double(st.max), bound) << "max " << st.max << " mean " << st.mean;
}

TEST(Planner, PublicCasesAt132CtasAreCoveredAndBalancedWithin5Percent) {
  std::ifstream in(KBMLA_CASES_JSON);
  ASSERT_TRUE(in.good());
  auto doc = nlohmann::json::parse(in);
  ASSERT_GE(doc["cases"].size(), 14u);
  for (const auto& c : doc["cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    std::vector<int32_t> seqlens = c["seqlens"].get<std::vector<int32_t>>();
    PlanShape s = sm90_shape(c["batch"], c["q_len"], c["heads"]);
    HostPlan plan = make_host_plan(s, seqlens);
    EXPECT_EQ(test::plan_violation(s, seqlens, plan), "");
    // The acceptance bar of `kbmla plan`: max/mean <= 1.05 on every public case.
    EXPECT_LE(cost_stats(plan.cluster_cost).max_over_mean(), 1.05);
    // And on the public cases (those with reference figures) it beats (or ties) the best
    // static split of a sweep. kbmla's own uniform additions with two q tiles per request
    // (kimi_uniform_B32_Sq9_H24, uniform_B32_Sq16_H16) are 1.5 % behind an equal 2-way
    // split in this model: a known limit of the contiguous fill on uniform batches
    // (bench/NOTES.md), checked here so that it cannot grow unnoticed.
    StaticSweepResult st = best_static_split(s, seqlens, false, 64);
    const double slack = c.contains("reference_kernel_pct_of_copy") ? 1.0 : 1.02;
    EXPECT_LE(double(cost_stats(plan.cluster_cost).max), slack * double(cost_stats(st.cluster_costs).max));
  }
}

TEST(Planner, SkewedBatchSplitsTheLongRequestAndKeepsShortOnesWhole) {
  std::vector<int32_t> seqlens(128, 1024);
  seqlens[0] = 131072;
  PlanShape s = sm90_shape(128, 1, 16);
  HostPlan plan = make_host_plan(s, seqlens);
  ASSERT_EQ(test::plan_violation(s, seqlens, plan), "");
  EXPECT_GT(plan.num_splits[0], 32);
  for (int b = 1; b < 128; ++b) EXPECT_LE(plan.num_splits[b], 2) << b;
  // Splits of the long request differ in length only where they meet other requests.
  EXPECT_LE(cost_stats(plan.cluster_cost).max_over_mean(), 1.05);
}

TEST(Planner, EmptyRequestsAndMaskedTilesAreZeroFilled) {
  // 96 heads x q_len 4 = 384 rows = 3 tiles of 128; seqlen 2 < q_len makes tokens 0, 1
  // see nothing: rows 0..191, i.e. tile 0 and half of tile 1.
  std::vector<int32_t> seqlens = {0, 2, 5000, 0};
  PlanShape s = sm90_shape(4, 4, 96);
  HostPlan plan = make_host_plan(s, seqlens);
  ASSERT_EQ(test::plan_violation(s, seqlens, plan), "");
  EXPECT_EQ(plan.num_splits[0], 0);
  EXPECT_EQ(plan.num_splits[3], 0);
  // 3 tiles each for requests 0 and 3, tile 0 of request 1.
  EXPECT_EQ(plan.counts.num_zero_fill, 7);
}

TEST(Planner, NonCausalRowsAllSeeKeys) {
  std::vector<int32_t> seqlens = {2, 1};
  PlanShape s = sm90_shape(2, 9, 16);
  s.causal = false;
  HostPlan plan = make_host_plan(s, seqlens);
  ASSERT_EQ(test::plan_violation(s, seqlens, plan), "");
  EXPECT_EQ(plan.counts.num_zero_fill, 0);
}

TEST(Planner, SplitsNeverExceedBlocksNor256) {
  // One 1M-token request on a large CTA budget would want ~1000 splits.
  std::vector<int32_t> seqlens = {1 << 20};
  PlanShape s = sm90_shape(1, 4, 16, 1024);
  HostPlan plan = make_host_plan(s, seqlens);
  ASSERT_EQ(test::plan_violation(s, seqlens, plan), "");
  EXPECT_EQ(plan.num_splits[0], 256);
  // Tiny requests with many CTAs: never more splits than blocks.
  std::vector<int32_t> small = {1, 64, 65, 130};
  PlanShape s2 = sm90_shape(4, 1, 16, 132);
  HostPlan p2 = make_host_plan(s2, small);
  ASSERT_EQ(test::plan_violation(s2, small, p2), "");
  EXPECT_EQ(p2.num_splits[0], 1);
  EXPECT_EQ(p2.num_splits[1], 1);
  EXPECT_LE(p2.num_splits[2], 2);
  EXPECT_LE(p2.num_splits[3], 3);
}

TEST(Planner, CtaBudgetBelowSmCountAndClusters) {
  std::vector<int32_t> seqlens = {100000, 300, 7, 64, 0, 65536};
  for (int ctas : {1, 2, 3, 16, 100, 131, 132}) {
    for (int cluster : {1, 2}) {
      if (ctas < cluster) continue;
      PlanShape s = sm90_shape(6, 2, 64, ctas);
      s.cluster_size = cluster;
      s.tile_rows = 64 * cluster;
      HostPlan plan = make_host_plan(s, seqlens);
      EXPECT_EQ(test::plan_violation(s, seqlens, plan), "") << ctas << " CTAs, cluster " << cluster;
      EXPECT_EQ(plan.counts.num_clusters, ctas / cluster);
      expect_balanced(s, seqlens, plan);
    }
  }
}

TEST(Planner, FixedGridPlansStrideEverySlotAndFitTheCapacities) {
  std::vector<int32_t> seqlens = {77, 131072, 5, 0, 4096, 999, 1};
  for (int ctas : {2, 7, 132}) {
    PlanShape s = sm90_shape(7, 4, 24, ctas);  // 96 rows: clusters of 2
    s.fixed_grid = true;
    HostPlan plan = make_host_plan(s, seqlens);
    ASSERT_EQ(test::plan_violation(s, seqlens, plan), "");
    EXPECT_EQ(plan.counts.num_active_clusters, plan.counts.num_clusters);
    PlanCapacity cap = plan_capacity(s);
    EXPECT_LE(plan.counts.work_list_len, cap.work_list);
    EXPECT_LE(plan.counts.num_bounds, cap.bounds);
    EXPECT_LE(plan.counts.num_zero_fill, cap.zero_fill);
    EXPECT_LE(plan.counts.num_slots, cap.partial_slots);
    int split_requests = 0;
    for (int32_t n : plan.num_splits) split_requests += n > 1;
    EXPECT_LE(split_requests, cap.split_requests);
  }
}

TEST(Planner, DeterministicBytes) {
  std::vector<int32_t> seqlens = {77, 131072, 5, 4096, 4096, 0, 999};
  PlanShape s = sm90_shape(7, 4, 24);
  HostPlan a = make_host_plan(s, seqlens), b = make_host_plan(s, seqlens);
  EXPECT_EQ(a.work_list, b.work_list);
  EXPECT_EQ(a.bounds, b.bounds);
  EXPECT_EQ(a.num_splits, b.num_splits);
  EXPECT_EQ(a.first_slot, b.first_slot);
  EXPECT_EQ(a.bounds_offset, b.bounds_offset);
  EXPECT_EQ(a.zero_fill, b.zero_fill);
  EXPECT_EQ(a.cluster_cost, b.cluster_cost);
}

TEST(Planner, WorkspaceSizeMatchesLayoutAndBound) {
  std::vector<int32_t> seqlens = {131072, 100};
  PlanShape s = sm90_shape(2, 1, 16);
  HostPlan plan = make_host_plan(s, seqlens);
  ASSERT_GT(plan.counts.num_slots, 1);
  const size_t rows = 16;
  // Header, partial LSE, one 8-byte piece flag per slot and 64 rows, partial O.
  const size_t expected = 256 + align_up(plan.counts.num_slots * rows * 4, 256) +
                          align_up(plan.counts.num_slots * 1 * 8, 256) + align_up(plan.counts.num_slots * rows * 512 * 4, 256);
  EXPECT_EQ(plan.workspace_bytes(512), expected);
  EXPECT_LE(plan.counts.num_slots, max_partial_slots(s));
}

TEST(Planner, RejectsBadInputWithNamedValues) {
  std::vector<int32_t> one = {10};
  auto expect_error = [&](PlanShape s, std::vector<int32_t> seqlens, const std::string& needle) {
    try {
      make_host_plan(s, seqlens);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  PlanShape s = sm90_shape(1, 1, 16);
  auto with = [&](auto f) { PlanShape t = s; f(t); return t; };
  expect_error(with([](PlanShape& t) { t.batch = 0; }), {}, "batch (0)");
  expect_error(with([](PlanShape& t) { t.q_len = 0; }), one, "q_len (0)");
  expect_error(with([](PlanShape& t) { t.heads = 0; }), one, "heads (0) must be in 1..64");
  expect_error(with([](PlanShape& t) { t.heads = 65; }), one, "heads (65) must be in 1..64");
  expect_error(with([](PlanShape& t) { t.cluster_size = 3; }), one, "cluster_size (3)");
  expect_error(with([](PlanShape& t) { t.kv_block = 0; }), one, "kv_block (0)");
  expect_error(with([](PlanShape& t) { t.num_ctas = 0; }), one, "num_ctas (0)");
  expect_error(with([](PlanShape& t) { t.cost.per_item = 0; }), one, "per_item 0");
  expect_error(with([](PlanShape& t) { t.tile_rows = 0; }), one, "tile_rows (0)");
  expect_error(s, {10, 20}, "seqlens has 2 entries, batch is 1");
  expect_error(with([](PlanShape& t) { t.batch = 3; }), {5, -7, 3}, "seqlens[1] = -7 must be >= 0");
  // q_tile * B + batch < 2^23: 64 heads x 32 tokens at 64 rows = 32 tiles, so batch 2^18
  // is the largest that fits.
  PlanShape edge = with([](PlanShape& t) { t.heads = 64; t.q_len = 32; t.batch = 1 << 18; });
  EXPECT_NO_THROW(make_host_plan(edge, std::vector<int32_t>(1 << 18, 0)));
  PlanShape big = with([](PlanShape& t) { t.heads = 64; t.q_len = 32; t.batch = (1 << 18) + 1; });
  expect_error(big, std::vector<int32_t>((1 << 18) + 1, 1), "must be <= 2^23");
}

// The default cost models (planner_core.hpp, fitted in bench/NOTES.md v28, v41): the fitted
// block and item costs apply from 17 rows per request (64-row tiles carrying more than 16
// valid rows) and, for the fp8 caches, again above 64 (2-CTA clusters); per_split follows
// the rows of one CTA, capped at 64, and the partials' element size.
TEST(Planner, DefaultCostModelsByDtypeAndRows) {
  auto expect_model = [](KvDtype dt, int heads, int q_len, int64_t block, int64_t item, int64_t split) {
    SCOPED_TRACE(::testing::Message() << kv_dtype_name(dt) << " heads " << heads << " q_len " << q_len);
    const CostModel c = sm90_cost_model(dt, heads, q_len);
    EXPECT_EQ(c.per_kv_block, block);
    EXPECT_EQ(c.per_item, item);
    EXPECT_EQ(c.per_split, split);
  };
  expect_model(KvDtype::kBFloat16, 16, 1, 2400, 6000, 1000 + 64 * 16);  // narrow consumers (v41)
  expect_model(KvDtype::kBFloat16, 17, 1, 2350, 8400, 1000 + 64 * 17);
  expect_model(KvDtype::kBFloat16, 16, 4, 2350, 8400, 1000 + 64 * 64);
  expect_model(KvDtype::kBFloat16, 96, 4, 2400, 3000, 1000 + 64 * 64);  // clusters: not refitted
  // The fp8 caches' partials are bf16: half the bytes per row.
  expect_model(KvDtype::kFp8E4m3, 16, 1, 1000, 5000, 1000 + 32 * 16);
  expect_model(KvDtype::kFp8E4m3, 12, 4, 1400, 8300, 1000 + 32 * 48);
  expect_model(KvDtype::kFp8E4m3, 128, 1, 1220, 8250, 1000 + 32 * 64);
  expect_model(KvDtype::kFp8E4m3PerBlock, 8, 2, 1000, 3000, 1000 + 32 * 16);
  expect_model(KvDtype::kFp8E4m3PerBlock, 64, 1, 2200, 8600, 1000 + 32 * 64);
  expect_model(KvDtype::kFp8E4m3PerBlock, 24, 9, 2120, 9090, 1000 + 32 * 64);
}

}  // namespace
}  // namespace kbmla
