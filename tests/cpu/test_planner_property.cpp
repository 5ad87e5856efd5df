// Property test: 100,000 random configurations (batch 1..1024, seqlens 0..1,048,576 in
// uniform, skewed and heavy-tailed mixes, q_len 1..9, heads 1..128, CTA budgets 1..264),
// each checked for coverage, owners, the scheduler walk, limits and balance. Four shards
// of 25,000 so ctest can spread them over cores.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <random>

#include "kbmla/planner.hpp"
#include "kbmla/static_baseline.hpp"
#include "tests/cpu/plan_checks.hpp"

namespace kbmla {
namespace {

constexpr int kShards = 4;
constexpr int kConfigsPerShard = 25000;

std::vector<int32_t> random_seqlens(std::mt19937_64& rng, int batch) {
  constexpr int kMax = 1 << 20;
  std::uniform_int_distribution<int> mix(0, 4), any(0, kMax), small(0, 2048);
  std::vector<int32_t> s(batch);
  switch (mix(rng)) {
    case 0: {  // uniform batch
      int L = any(rng) >> std::uniform_int_distribution<int>(0, 12)(rng);
      std::fill(s.begin(), s.end(), L);
      break;
    }
    case 1: {  // a few long requests among short ones
      for (auto& x : s) x = small(rng);
      int longs = std::uniform_int_distribution<int>(1, std::max(1, batch / 16))(rng);
      for (int i = 0; i < longs; ++i) s[std::uniform_int_distribution<int>(0, batch - 1)(rng)] = any(rng);
      break;
    }
    case 2: {  // heavy tail (log-normal), as serving batches are
      std::lognormal_distribution<double> ln(7.5, 1.8);
      for (auto& x : s) x = int32_t(std::min<double>(kMax, ln(rng)));
      break;
    }
    case 3: {  // uniform random over the whole range
      for (auto& x : s) x = any(rng) >> std::uniform_int_distribution<int>(0, 16)(rng);
      break;
    }
    default: {  // edge lengths around page and block boundaries, zeros included
      const int edges[] = {0, 1, 2, 8, 9, 63, 64, 65, 127, 128, 129, 4095, 4096, 4097};
      for (auto& x : s) x = edges[std::uniform_int_distribution<int>(0, 13)(rng)];
      break;
    }
  }
  return s;
}

// Batch 1..2^max_log_batch, q_len 1..9, heads 1..128, causal or not (q_len > 1), CTA
// budgets 132 or 1..264, the sm_90 tile and cluster for the rows.
PlanShape random_shape(std::mt19937_64& rng, int max_log_batch) {
  std::uniform_int_distribution<int> q_len_d(1, 9), heads_d(1, 128), log_batch(0, max_log_batch), coin(0, 1);
  std::uniform_int_distribution<int> ctas_d(1, 264);
  PlanShape s;
  const int hi = 1 << log_batch(rng);
  s.batch = std::uniform_int_distribution<int>(std::max(1, hi / 2), hi)(rng);
  s.q_len = q_len_d(rng);
  s.heads = heads_d(rng);
  s.causal = coin(rng) || s.q_len == 1;
  s.cluster_size = s.heads * s.q_len > 64 ? 2 : 1;
  s.tile_rows = 64 * s.cluster_size;
  s.num_ctas = coin(rng) ? 132 : std::max(s.cluster_size, ctas_d(rng));
  return s;
}

class PlannerProperty : public ::testing::TestWithParam<int> {};

TEST_P(PlannerProperty, RandomConfigurationsHoldEveryInvariant) {
  std::mt19937_64 rng(0x6b626d6c61ull + GetParam());
  int failures = 0;
  for (int i = 0; i < kConfigsPerShard && failures < 5; ++i) {
    PlanShape s = random_shape(rng, 10);
    std::vector<int32_t> seqlens = random_seqlens(rng, s.batch);
    s.fixed_grid = i % 7 == 0;
    HostPlan plan = make_host_plan(s, seqlens);
    const PlanCapacity cap = plan_capacity(s);
    if (plan.counts.work_list_len > cap.work_list || plan.counts.num_bounds > cap.bounds ||
        plan.counts.num_zero_fill > cap.zero_fill || plan.counts.num_slots > cap.partial_slots) {
      ++failures;
      ADD_FAILURE() << "config " << i << ": plan exceeds plan_capacity";
    }
    std::string v = test::plan_violation(s, seqlens, plan);
    CostStats st = cost_stats(plan.cluster_cost);
    const double bound = std::max(1.05 * st.mean, st.mean + double(test::largest_piece_cost(s, seqlens, plan)));
    if (!v.empty() || double(st.max) > bound) {
      ++failures;
      ADD_FAILURE() << "config " << i << ": batch " << s.batch << " q_len " << s.q_len << " heads " << s.heads
                    << " ctas " << s.num_ctas << ": " << (v.empty() ? "imbalanced" : v) << " (max " << st.max
                    << ", mean " << st.mean << ", cap " << plan.counts.cap << ") seqlens "
                    << ::testing::PrintToString(seqlens);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Shards, PlannerProperty, ::testing::Range(0, kShards));

// Every event a fill emits, in order.
struct RecordingSink {
  std::vector<std::array<int64_t, 7>> events;
  void piece(int cluster, int b, const plan_detail::RequestInfo&, int tile, int split, int begin, int end) {
    events.push_back({0, cluster, b, tile, split, begin, end});
  }
  void whole_request(int b, const plan_detail::RequestInfo&) { events.push_back({1, b, 0, 0, 0, 0, 0}); }
  void item(int cluster, int b, int tile) { events.push_back({2, cluster, b, tile, 0, 0, 0}); }
  void request_done(int b, const plan_detail::RequestInfo&, int splits) { events.push_back({3, b, splits, 0, 0, 0, 0}); }
  void cluster_done(int cluster, int64_t load) { events.push_back({4, cluster, load, 0, 0, 0, 0}); }
};

// The fill's one-step jump over the slots a long request fills is the slot-by-slot loop:
// same verdict and the same events, for random shapes and caps around the planned one.
TEST(PlannerFill, JumpOverFullSlotsEmitsWhatTheLoopEmits) {
  std::mt19937_64 rng(0x6a756d70ull);
  std::uniform_int_distribution<int> scale_d(900, 1100);
  for (int i = 0; i < 20000; ++i) {
    PlanShape s = random_shape(rng, 8);
    std::vector<int32_t> seqlens = random_seqlens(rng, s.batch);
    const PlanCounts counts = plan_measure(s, seqlens.data());
    const int64_t cap = std::max<int64_t>(1, counts.cap * scale_d(rng) / 1000);
    RecordingSink jump, loop;
    const plan_detail::SeqlenRequests reqs{&s, seqlens.data(), counts.num_q_tiles};
    const bool a =
        plan_detail::fill<RecordingSink, true>(s, reqs, counts.num_q_tiles, counts.num_clusters, cap, false, jump);
    const bool b =
        plan_detail::fill<RecordingSink, false>(s, reqs, counts.num_q_tiles, counts.num_clusters, cap, false, loop);
    ASSERT_EQ(a, b) << "config " << i;
    if (a) {
      ASSERT_EQ(jump.events, loop.events) << "config " << i;
    }
  }
}


// The device planner's staged form (request terms computed once per request, then read by
// every pass) makes the same counts and writes the same bytes as the seqlens form.
TEST(PlannerFill, StagedRequestTermsPlanTheSameBytes) {
  std::mt19937_64 rng(0x7465726dull);
  for (int i = 0; i < 3000; ++i) {
    PlanShape s = random_shape(rng, 9);
    if (i % 3 == 0) s.fixed_grid = true;
    std::vector<int32_t> seqlens = random_seqlens(rng, s.batch);
    if (i % 97 == 0) seqlens[size_t(i) % seqlens.size()] = -1;  // a bad seqlen: the same status and index
    const int T = plan_detail::ceil_div(s.heads * s.q_len, s.tile_rows);
    std::vector<plan_detail::RequestTerms> terms;
    for (int32_t L : seqlens) terms.push_back(plan_detail::request_terms(s, L, T, /*staged=*/true));
    const plan_detail::StagedRequests staged{seqlens.data(), terms.data()};
    const plan_detail::SeqlenRequests direct{&s, seqlens.data(), T};
    const PlanCounts a = plan_measure_requests(s, direct, SequentialProbes{});
    const PlanCounts b = plan_measure_requests(s, staged, SequentialProbes{});
    ASSERT_EQ(a.status, b.status) << "config " << i;
    ASSERT_EQ(a.bad_index, b.bad_index) << "config " << i;
    if (a.status != kPlanOk) continue;
    ASSERT_EQ(a.cap, b.cap) << "config " << i;
    ASSERT_EQ(a.whole_requests, b.whole_requests) << "config " << i;
    ASSERT_EQ(a.work_list_len, b.work_list_len) << "config " << i;
    ASSERT_EQ(a.num_bounds, b.num_bounds) << "config " << i;
    ASSERT_EQ(a.num_zero_fill, b.num_zero_fill) << "config " << i;
    test::PlanTables x, y;
    PlanBuffers bx = x.buffers(a, s.batch, /*with_cluster_cost=*/true);
    PlanBuffers by = y.buffers(b, s.batch, /*with_cluster_cost=*/true);
    ASSERT_EQ(plan_write_requests(s, direct, a, bx), kPlanOk);
    ASSERT_EQ(plan_write_requests(s, staged, b, by), kPlanOk);
    ASSERT_TRUE(x == y)
        << "config " << i;
  }
}

// The cut's division by a piece's per-block cost: the multiply-high form of staged terms
// equals the division wherever it is taken.
TEST(PlannerFill, StagedDivisionIsTheDivision) {
  std::mt19937_64 rng(0x646976ull);
  PlanShape s;
  for (int i = 0; i < 200000; ++i) {
    s.cost.per_kv_block = std::uniform_int_distribution<int64_t>(1, i % 2 ? 5000 : (int64_t{1} << 32))(rng);
    s.q_len = 1;
    s.heads = std::uniform_int_distribution<int>(1, 128)(rng);
    s.tile_rows = 64;
    const int T = plan_detail::ceil_div(s.heads, s.tile_rows);
    const plan_detail::RequestTerms t = plan_detail::request_terms(s, 1 << 20, T, /*staged=*/true);
    const int64_t space = std::uniform_int_distribution<int64_t>(0, int64_t{1} << (i % 3 ? 31 : 40))(rng);
    ASSERT_EQ(plan_detail::blocks_within(t, space), space / t.block_cost) << space << " / " << t.block_cost;
  }
}

}  // namespace
}  // namespace kbmla

namespace kbmla {
namespace {

// The probes of a round rise strictly (first_fitting takes the lowest that fits), and a
// round where none fits makes its last probe the next round's known-failing low, whatever
// the first round's grid (uniform from `skip`, or fine probes between coarse ones).
TEST(PlannerSearch, ProbesRiseAndAFailedRoundMovesLowToItsLastProbe) {
  CapSearch uniform;
  uniform.low = 1000;
  uniform.step = 50;
  uniform.skip = 400;
  CapSearch two_level = uniform;
  two_level.coarse = 50;
  two_level.below = 2;
  two_level.fine = 12;
  two_level.step = 7;
  two_level.skip = 700;
  for (CapSearch s : {uniform, two_level}) {
    for (int round = 0; round < 3; ++round) {
      ASSERT_GT(s.probe(0), s.low) << "round " << round;
      for (int i = 1; i < kCapProbes; ++i) ASSERT_GT(s.probe(i), s.probe(i - 1)) << "round " << round << " probe " << i;
      const int64_t last = s.probe(kCapProbes - 1);
      s.update(kCapProbes);
      ASSERT_EQ(s.low, last) << "round " << round;
      ASSERT_FALSE(s.found);
    }
    // A fit at probe 5 brackets the cap between probes 4 and 5.
    const int64_t p4 = s.probe(4), p5 = s.probe(5);
    s.update(5);
    EXPECT_TRUE(s.found);
    EXPECT_EQ(s.low, p4);
    EXPECT_EQ(s.high, p5);
  }
}

// The form rule, whatever order the search takes the forms in (the whole form is tried
// first where it may fit): whole requests exactly when their largest q tile unit and the
// whole fill fit at the cut form's least cap plus 1/16, and then at a cap within that
// limit and no lower than the whole form's floor (total / G and the largest unit).
TEST(PlannerSearch, WholeFormExactlyWhenItFitsWithinASixteenthOfTheCutCap) {
  std::mt19937_64 rng(0x666f726dull);
  int whole_plans = 0;
  for (int i = 0; i < 4000; ++i) {
    PlanShape s = random_shape(rng, 10);
    s.fixed_grid = i % 2 == 0;
    const std::vector<int32_t> seqlens = random_seqlens(rng, s.batch);
    const int T = plan_detail::ceil_div(s.heads * s.q_len, s.tile_rows);
    const int G = s.num_ctas / s.cluster_size;
    const plan_detail::SeqlenRequests reqs{&s, seqlens.data(), T};
    int64_t total = 0, largest = 0;
    for (int b = 0; b < s.batch; ++b) {
      const plan_detail::RequestTerms q = reqs.terms(b);
      total += q.whole;
      if (q.r.blocks > 0 && q.r.tiles > 0) largest = std::max(largest, q.tile_cost);
    }
    const PlanCounts plan = plan_measure(s, seqlens.data());
    ASSERT_EQ(plan.status, kPlanOk) << "config " << i;
    // The cut form alone: a largest unit beyond every limit rules the whole form out.
    auto fill_counts = [&](int64_t cap, bool whole, PlanCounts& local) {
      plan_detail::CountSink sink(&local);
      return plan_detail::fill(s, reqs, T, G, cap, whole, sink);
    };
    const PlanCounts cut = plan_search(s, total, INT64_MAX, SequentialProbes{}, fill_counts);
    ASSERT_FALSE(cut.whole_requests) << "config " << i;
    const int64_t limit = cut.cap + cut.cap / 16;
    PlanCounts at_limit;
    at_limit.num_q_tiles = T;
    at_limit.num_clusters = G;
    const bool whole_fits = largest <= limit && fill_counts(limit, true, at_limit);
    ASSERT_EQ(plan.whole_requests, whole_fits) << "config " << i << ": cut cap " << cut.cap;
    if (!plan.whole_requests) {
      ASSERT_EQ(plan.cap, cut.cap) << "config " << i;
      continue;
    }
    ++whole_plans;
    const int64_t floor = std::max(plan_detail::ceil_div64(total, G), largest);
    ASSERT_LE(plan.cap, limit) << "config " << i;
    ASSERT_GE(plan.cap, floor) << "config " << i;
  }
  EXPECT_GT(whole_plans, 400);  // (both forms are exercised)
}

// Batches shaped like the public cases plan in one round: uniform ones (their q tile
// units pack into the slots within 1/16 of the bound: the whole form first), a lognormal
// one and a skewed one (the cut form's first round around where its caps gather). Measured
// before on the device: four and five rounds of 25-70 us each at B128 (bench/NOTES.md v45).
TEST(PlannerSearch, RoundsOfUniformAndLognormalBatches) {
  auto rounds_of = [](int batch, int q_len, int heads, const std::vector<int32_t>& seqlens) {
    PlanShape s = test::sm90_shape(batch, q_len, heads);
    s.fixed_grid = true;
    s.cost = sm90_bf16_cost_model(heads * q_len);
    int rounds = 0;
    const PlanCounts c = plan_measure_with(s, seqlens.data(), RoundCountingProbes{&rounds});
    EXPECT_EQ(c.status, kPlanOk);
    return std::pair<int, bool>(rounds, c.whole_requests);
  };
  EXPECT_EQ(rounds_of(128, 4, 16, std::vector<int32_t>(128, 4096)), std::make_pair(1, true));
  EXPECT_EQ(rounds_of(128, 2, 128, std::vector<int32_t>(128, 4096)), std::make_pair(1, true));
  EXPECT_EQ(rounds_of(32, 9, 24, std::vector<int32_t>(32, 8192)), std::make_pair(1, true));
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> ln(8.0, 1.2);
  std::vector<int32_t> lognormal(128);
  for (auto& x : lognormal) x = std::min<int>(131072, std::max<int>(1, int(ln(rng))));
  EXPECT_EQ(rounds_of(128, 4, 16, lognormal), std::make_pair(1, false));
  std::vector<int32_t> skew(128, 1024);
  skew[0] = 131072;
  EXPECT_EQ(rounds_of(128, 1, 16, skew), std::make_pair(1, false));
  EXPECT_EQ(rounds_of(1, 1, 16, std::vector<int32_t>(1, 131072)), std::make_pair(1, false));
}

}  // namespace
}  // namespace kbmla
