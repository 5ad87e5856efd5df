// Batch-invariant plans (PlanOptions::batch_invariant_split_blocks, issue 6): a request's
// splits come from its own length only, so the same request in any batch gets the same
// split table and, through the split emulation, bitwise the same output.
#include <gtest/gtest.h>

#include <random>

#include "kbmla/decode.hpp"
#include "kbmla/error.hpp"
#include "kbmla/planner.hpp"
#include "reference/random_problem.hpp"
#include "reference/reference.hpp"
#include "tests/cpu/plan_checks.hpp"

namespace kbmla {
namespace {

PlanShape invariant_shape(int batch, int q_len, int heads, int ctas, int chunk) {
  PlanShape s = test::sm90_shape(batch, q_len, heads, ctas);
  s.fixed_split_blocks = chunk;
  return s;
}

std::vector<int32_t> split_of(const HostPlan& plan, int b) {
  const int ns = plan.num_splits[b];
  const int off = plan.bounds_offset[b];
  return {plan.bounds.begin() + off, plan.bounds.begin() + off + (ns > 0 ? ns + 1 : 0)};
}

TEST(BatchInvariantPlan, ARequestsSplitsDependOnItsLengthOnly) {
  std::mt19937_64 rng(77);
  std::uniform_int_distribution<int> len(0, 300000), pos_d(0, 1 << 20), ctas_d(2, 264), batch_d(1, 200);
  for (int trial = 0; trial < 300; ++trial) {
    const int q_len = 1 + trial % 9, heads = trial % 3 == 0 ? 128 : 16;
    const int chunk = 1 + trial % 64;
    const int32_t x_len = len(rng);
    const int nb = (x_len + 63) / 64;
    const int step = std::max(chunk, (nb + 255) / 256);
    std::vector<int32_t> want;
    for (int b = 0; nb > 0 && b < nb; b += step) want.push_back(b);
    if (nb > 0) want.push_back(nb);
    for (int variant = 0; variant < 3; ++variant) {
      const int batch = variant == 0 ? 1 : batch_d(rng);
      std::vector<int32_t> seqlens(batch);
      for (auto& L : seqlens) L = len(rng) >> (pos_d(rng) % 8);
      const int x = pos_d(rng) % batch;
      seqlens[x] = x_len;
      PlanShape s = invariant_shape(batch, q_len, heads, variant == 0 ? 132 : ctas_d(rng), chunk);
      if (s.num_ctas < s.cluster_size) s.num_ctas = s.cluster_size;
      HostPlan plan = make_host_plan(s, seqlens);
      SCOPED_TRACE(::testing::Message() << "trial " << trial << " variant " << variant << " chunk " << chunk
                                        << " length " << x_len << " batch " << batch);
      ASSERT_EQ(test::plan_violation(s, seqlens, plan), "");
      EXPECT_EQ(split_of(plan, x), want);
    }
  }
}

TEST(BatchInvariantPlan, SplitEmulationGivesBitwiseTheSameRowsInAnyBatch) {
  using namespace ref;
  const int heads = 16, q_len = 2, chunk = 16;
  const int32_t x_len = 9000;  // 141 blocks: 9 splits of 16
  auto output_of_x = [&](const std::vector<int32_t>& seqlens, int x, int ctas) {
    Problem p;
    p.batch = int(seqlens.size());
    p.q_len = q_len;
    p.heads = heads;
    p.scale = 1.0 / std::sqrt(576.0);
    auto r = make_random_problem<Bf16>(p, seqlens, 5);
    // The same q rows and keys for request x in every batch: copy them from a batch of one.
    auto alone = make_random_problem<Bf16>([&] { Problem q1 = p; q1.batch = 1; return q1; }(), {x_len}, 5);
    std::copy_n(alone.q.begin(), size_t(q_len) * heads * 576, r.q.begin() + size_t(x) * q_len * heads * 576);
    for (int j = 0; j < (x_len + 63) / 64; ++j) {
      const auto* src = &alone.cache[size_t(alone.block_table[j]) * 64 * 576];
      auto* dst = &r.cache[size_t(r.block_table[size_t(x) * r.problem.max_pages + j]) * 64 * 576];
      std::copy_n(src, 64 * 576, dst);
    }
    PlanShape s = invariant_shape(p.batch, q_len, heads, ctas, chunk);
    HostPlan plan = make_host_plan(s, seqlens);
    Outputs o = emulate_split_decode(r.problem, r.inputs(), plan);
    const size_t rows = size_t(q_len) * heads;
    return std::vector<double>(o.out.begin() + x * rows * 512, o.out.begin() + (x + 1) * rows * 512);
  };
  const std::vector<double> alone = output_of_x({x_len}, 0, 132);
  EXPECT_EQ(output_of_x({300, x_len, 0, 5000}, 1, 132), alone);
  EXPECT_EQ(output_of_x({20000, 64, 7, 1, 130000, x_len}, 5, 40), alone);
}

TEST(BatchInvariantPlan, OptionsAreCheckedWithNamedValues) {
  DecodeConfig config;
  config.softmax_scale = 0.1f;
  PlanOptions options;
  options.num_ctas = 132;
  const std::vector<int32_t> seqlens = {100};
  auto expect_error = [&](const PlanOptions& o, const char* needle, bool device) {
    try {
      if (device) {
        (void)DevicePlan::create_device_planned(config, 1, o);
      } else {
        (void)DevicePlan::create(config, seqlens, o);
      }
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  options.batch_invariant_split_blocks = -3;
  expect_error(options, "batch_invariant_split_blocks (-3) must be >= 0", false);
  options.batch_invariant_split_blocks = 32;
  options.policy = Policy::kStatic;
  expect_error(options, "batch_invariant_split_blocks (32) needs the work-list policy, not static", false);
  options.policy = Policy::kWorkList;
  expect_error(options, "batch_invariant_split_blocks (32) is for host plans", true);
}

}  // namespace
}  // namespace kbmla
