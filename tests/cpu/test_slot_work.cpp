// The cost model's terms per slot (tools/slot_work.hpp), which kbmla plan prints and kbmla
// bench records beside each CTA's busy interval for fitting the model: each slot's terms,
// priced by the plan's own model, give the planner's own slot cost.
#include <gtest/gtest.h>

#include <random>

#include "kbmla/decode.hpp"
#include "kbmla/planner.hpp"
#include "tests/cpu/plan_checks.hpp"
#include "tools/slot_work.hpp"

namespace kbmla {
namespace {

void expect_terms_price_to_the_slot_costs(const PlanShape& s, const std::vector<int32_t>& seqlens) {
  const HostPlan plan = make_host_plan(s, seqlens);
  const std::vector<tools::SlotWork> work = tools::slot_work(plan);
  ASSERT_EQ(int(work.size()), plan.counts.num_active_clusters);
  int64_t items = 0;
  for (size_t g = 0; g < work.size(); ++g) {
    const tools::SlotWork& w = work[g];
    EXPECT_EQ(w.items * s.cost.per_item + w.blocks * s.cost.per_kv_block + w.split_items * s.cost.per_split,
              plan.cluster_cost[g])
        << "slot " << g;
    EXPECT_LE(w.split_items, w.items);
    items += w.items;
  }
  EXPECT_EQ(items, plan.counts.num_items);
}

TEST(SlotWork, TermsPriceToThePlannersSlotCosts) {
  std::vector<int32_t> skew(128, 1024);
  skew[0] = 131072;
  PlanShape narrow = test::sm90_shape(128, 1, 16);
  narrow.cost = sm90_fp8_cost_model(16);
  expect_terms_price_to_the_slot_costs(narrow, skew);
  // Several q tiles a request (96 heads x 4 rows: 2-CTA clusters of 128 rows), short and
  // empty requests among long ones.
  std::mt19937 rng(11);
  std::vector<int32_t> mixed(40);
  for (auto& l : mixed) l = int32_t(rng() % 20000);
  mixed[3] = 0;
  mixed[7] = 1;
  expect_terms_price_to_the_slot_costs(test::sm90_shape(40, 4, 96), mixed);
  expect_terms_price_to_the_slot_costs(test::sm90_shape(40, 9, 12), mixed);
}

}  // namespace
}  // namespace kbmla
