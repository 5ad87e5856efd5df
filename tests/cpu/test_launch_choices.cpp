// The host's per-plan launch choices (src/runtime/launch_choices.cpp) without a GPU: which
// fp8 Q path a plan takes, the items of its busiest CTA, and the combine's grid.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "kbmla/error.hpp"
#include "kbmla/planner.hpp"
#include "kbmla/static_baseline.hpp"
#include "src/runtime/plan_impl.hpp"
#include "src/sm90/decode/kernel.hpp"

namespace kbmla {
namespace {

// A plan's host half, as DevicePlan::create builds it (detail::make_host_impl: no upload).
// (The Impl holds a mutex: not copyable, so by pointer.)
struct CacheShape {
  int page_size = 64;
  int d_qk = 576;
  KvDtype kv_dtype = KvDtype::kFp8E4m3;
};
std::unique_ptr<DevicePlan::Impl> host_plan(int heads, int q_len, const std::vector<int32_t>& seqlens, int ctas,
                                            Policy policy = Policy::kWorkList, int static_splits = 1,
                                            CacheShape cache = {}) {
  const DecodeConfig config{.heads = heads, .q_len = q_len, .d_qk = cache.d_qk, .page_size = cache.page_size,
                            .kv_dtype = cache.kv_dtype, .softmax_scale = 1.f};
  return detail::make_host_impl(config, seqlens,
                                PlanOptions{.policy = policy, .num_ctas = ctas, .static_splits = static_splits, .cost = {}});
}

struct EnvGuard {
  explicit EnvGuard(const char* value, const char* name = "KBMLA_Q_INLINE") : name_(name) {
    if (value) {
      setenv(name_, value, 1);
    } else {
      unsetenv(name_);
    }
  }
  ~EnvGuard() { unsetenv(name_); }
  const char* name_;
};

// The split-role kernels' P V rows: the smallest of 32, 48, 64 that holds the tile's rows.
TEST(LaunchChoices, SplitPvRowsCoverTheTile) {
  auto n_for = [](int rows) { return sm90::with_split_pv_acc(rows, [](auto acc) { return 2 * acc(); }); };
  for (int rows = 17; rows <= 64; ++rows) {
    const int n = n_for(rows);
    EXPECT_GE(n, rows) << rows;
    EXPECT_TRUE(n == 32 || n == 48 || n == 64) << rows;
    EXPECT_TRUE(n == 32 || n - 16 < rows) << rows << " rows would fit N = " << n - 16;
  }
  EXPECT_EQ(n_for(48), 48);  // Kimi K3: 12 heads x q_len 4
  EXPECT_EQ(n_for(64), 64);
}

// 2-CTA tiles of 65..96 rows on the per-tensor fp8 split-role kernel run as two slices of
// 48 rows (kernel.hpp, cluster_cta_rows): P V over 48 rows in both CTAs, the second slice
// from row 48, one piece flag each. Every other tile keeps 64-row slices: more rows, bf16,
// per-block scales, d_qk 512 (its P V over 64 rows would write the other slice's rows),
// the alternating kernel, one-CTA tiles.
TEST(LaunchChoices, TwoCtaTilesOfAtMost96RowsRunInSlicesOf48) {
  const CacheShape per_tensor{}, per_block{64, 576, KvDtype::kFp8E4m3PerBlock}, bf16{64, 576, KvDtype::kBFloat16},
      no_rope{64, 512, KvDtype::kFp8E4m3};
  auto slice = [](int heads, int q_len, CacheShape cache) {
    const sm90::DecodeParams p =
        detail::kernel_choice_params(*host_plan(heads, q_len, {3000, 100}, 132, Policy::kWorkList, 1, cache));
    return std::pair{p.cta_rows, sm90::split_cta_rows(p)};
  };
  EXPECT_EQ(slice(24, 4, per_tensor), std::pair(48, 48));  // Kimi K3, 24 heads x q_len 4
  EXPECT_EQ(slice(96, 1, per_tensor), std::pair(48, 48));
  EXPECT_EQ(slice(65, 1, per_tensor), std::pair(48, 48));  // slices of 48 and 17 rows
  EXPECT_EQ(slice(97, 1, per_tensor), std::pair(64, 64));
  EXPECT_EQ(slice(24, 9, per_tensor), std::pair(64, 64));  // 216 rows: two tiles
  EXPECT_EQ(slice(16, 4, per_tensor).first, 64);           // one CTA of 64 rows
  EXPECT_EQ(slice(24, 4, per_block), std::pair(64, 64));
  EXPECT_EQ(slice(24, 4, bf16).first, 64);
  EXPECT_EQ(slice(24, 4, no_rope), std::pair(64, 64));
  {
    EnvGuard alternating("never", "KBMLA_FP8_SPLIT_ROLES");
    EXPECT_EQ(slice(24, 4, per_tensor).first, 64);
  }
  // Both slices' flags fit the workspace's two a slot, and a row's flag is its slice's.
  for (int rows = 65; rows <= 96; ++rows) EXPECT_EQ(piece_row_groups(rows), 2) << rows;
  EXPECT_EQ(piece_of_row(47, 48), 0);
  EXPECT_EQ(piece_of_row(48, 48), 1);
  EXPECT_EQ(piece_of_row(95, 48), 1);
  EXPECT_EQ(piece_of_row(63, 64), 0);
  EXPECT_EQ(piece_of_row(64, 64), 1);
  EXPECT_EQ(piece_of_row(200, 64), 3);
  const DecodePath d = detail::describe_decode(*host_plan(24, 4, {3000, 100}, 132), QDtype::kBFloat16);
  EXPECT_EQ(d.cta_rows, 48);
  EXPECT_NE(d.kernel.find("P V over 48 rows"), std::string::npos) << d.kernel;
}

TEST(LaunchChoices, ItemsOfTheBusiestCta) {
  // Four requests on 132 CTAs: whole requests, one item each.
  EXPECT_EQ(detail::max_items_per_cta(*host_plan(16, 1, {4096, 4096, 4096, 4096}, 132)), 1);
  // Many short requests on 3 CTAs: several items per CTA, as the plan counts them.
  const auto few = host_plan(16, 4, {300, 900, 64, 2000, 5, 700, 1200}, 3);
  EXPECT_GT(detail::max_items_per_cta(*few), 1);
  EXPECT_EQ(detail::max_items_per_cta(*few), few->host.counts.max_items_per_cluster);
  // Static: one item per CTA; static persistent: ceil(items / CTAs) = ceil(7 x 2 / 5).
  EXPECT_EQ(detail::max_items_per_cta(*host_plan(16, 1, {300, 900, 64, 2000, 5, 700, 1200}, 5, Policy::kStatic, 2)), 1);
  EXPECT_EQ(detail::max_items_per_cta(
                *host_plan(16, 1, {300, 900, 64, 2000, 5, 700, 1200}, 5, Policy::kStaticPersistent, 2)),
            3);
}

TEST(LaunchChoices, Fp8QPathFollowsTheMeasuredRule) {
  EnvGuard env(nullptr);
  const std::vector<int32_t> many = {300, 900, 64, 2000, 5, 700, 1200};
  // <= 16 rows: in the kernel, whatever the items per CTA.
  EXPECT_TRUE(detail::fp8_quantises_q_in_kernel(*host_plan(16, 1, many, 3), 16));
  // 64 rows: in the kernel with one item per CTA, by the quantiser with more.
  EXPECT_TRUE(detail::fp8_quantises_q_in_kernel(*host_plan(16, 4, {4096, 4096}, 132), 64));
  EXPECT_FALSE(detail::fp8_quantises_q_in_kernel(*host_plan(16, 4, many, 3), 64));
  // 2-CTA clusters (more than 64 rows): always the quantiser.
  EXPECT_FALSE(detail::fp8_quantises_q_in_kernel(*host_plan(32, 4, {4096}, 132), 128));
}

// The per-tensor split-role kernel (17..64 rows, one CTA per tile; pages of 8+ tokens,
// d_qk 512 from 32) stages its bf16 Q whatever the items per CTA; KBMLA_Q_INLINE=never
// gives it the quantiser; the other kernels never stage.
TEST(LaunchChoices, SplitRoleKernelStagesItsQ) {
  EnvGuard env(nullptr);
  const std::vector<int32_t> many = {300, 900, 64, 2000, 5, 700, 1200};
  auto stages = [](const std::unique_ptr<DevicePlan::Impl>& plan) { return detail::fp8_stages_q_in_kernel(*plan); };
  EXPECT_TRUE(stages(host_plan(16, 4, many, 3)));
  EXPECT_TRUE(stages(host_plan(16, 4, {4096, 4096}, 132)));
  EXPECT_TRUE(stages(host_plan(12, 2, many, 3)));  // 24 rows
  EXPECT_TRUE(stages(host_plan(16, 4, many, 3, Policy::kWorkList, 1, {8, 576})));
  EXPECT_TRUE(stages(host_plan(16, 4, many, 3, Policy::kWorkList, 1, {32, 512})));
  EXPECT_TRUE(stages(host_plan(16, 4, many, 3, Policy::kStatic, 4)));
  EXPECT_FALSE(stages(host_plan(16, 1, many, 3)));                                     // 16 rows
  EXPECT_TRUE(stages(host_plan(32, 4, {4096}, 132)));  // 2-CTA clusters of 64 rows a CTA (v39)
  EXPECT_FALSE(stages(host_plan(16, 4, many, 3, Policy::kWorkList, 1, {4, 576})));   // row gather
  EXPECT_FALSE(stages(host_plan(16, 4, many, 3, Policy::kWorkList, 1, {16, 512})));  // d_qk 512, two loaders
  EXPECT_FALSE(stages(host_plan(16, 4, many, 3, Policy::kWorkList, 1, {64, 576, KvDtype::kFp8E4m3PerBlock})));
  EXPECT_FALSE(stages(host_plan(16, 4, many, 3, Policy::kWorkList, 1, {64, 576, KvDtype::kBFloat16})));
  {
    EnvGuard roles("never", "KBMLA_FP8_SPLIT_ROLES");
    EXPECT_FALSE(stages(host_plan(16, 4, many, 3)));
  }
  {
    EnvGuard never("never");
    EXPECT_FALSE(stages(host_plan(16, 4, many, 3)));
  }
  {
    EnvGuard always("always");
    EXPECT_TRUE(stages(host_plan(16, 4, many, 3)));
  }
  {
    EnvGuard bad("sometimes");
    EXPECT_THROW(stages(host_plan(16, 4, many, 3)), Error);
  }
}

TEST(LaunchChoices, Fp8QPathOverriddenByTheEnvironment) {
  const auto multi_plan = host_plan(16, 4, {300, 900, 64, 2000, 5, 700, 1200}, 3);
  const auto narrow_plan = host_plan(16, 1, {4096}, 132);
  const DevicePlan::Impl& multi = *multi_plan;
  const DevicePlan::Impl& narrow = *narrow_plan;
  {
    EnvGuard env("always");
    EXPECT_TRUE(detail::fp8_quantises_q_in_kernel(multi, 64));
    EXPECT_FALSE(detail::fp8_quantises_q_in_kernel(*host_plan(32, 4, {4096}, 132), 128));  // clusters cannot
  }
  {
    EnvGuard env("never");
    EXPECT_FALSE(detail::fp8_quantises_q_in_kernel(narrow, 16));
  }
  {
    EnvGuard env("auto");
    EXPECT_TRUE(detail::fp8_quantises_q_in_kernel(narrow, 16));
    EXPECT_FALSE(detail::fp8_quantises_q_in_kernel(multi, 64));
  }
  {
    EnvGuard env("sometimes");
    std::string what;
    try {
      detail::fp8_quantises_q_in_kernel(narrow, 16);
    } catch (const Error& e) {
      what = e.what();
    }
    EXPECT_NE(what.find("KBMLA_Q_INLINE='sometimes' must be auto, always or never"), std::string::npos) << what;
  }
}

CombineParams combine_counts(int rows, int split, int wide, int max_wide_splits, int zero) {
  CombineParams p{};
  p.rows = rows;
  p.num_split_requests = split;
  p.num_wide_requests = wide;
  p.max_wide_splits = max_wide_splits;
  p.num_zero_fill = zero;
  return p;
}

TEST(LaunchChoices, CombineGrid) {
  // Nothing to merge or fill: no launch.
  EXPECT_EQ(combine_blocks(combine_counts(64, 0, 0, 0, 0)), 0);
  // Narrow requests only (8-warp blocks): a warp per row of each request, then a block per
  // zero-filled q tile.
  EXPECT_EQ(combine_blocks(combine_counts(64, 5, 0, 0, 2)), (5 * 64 + 7) / 8 + 2);
  EXPECT_EQ(combine_blocks(combine_counts(12, 3, 0, 0, 0)), (3 * 12 + 7) / 8);
  // A wide request: a block per (row, column quarter); 4 warps for 17..36 splits (the
  // narrow requests then 4 rows a block), 8 up to 72 ...
  EXPECT_EQ(combine_blocks(combine_counts(16, 3, 1, 20, 1)), 16 * 4 + (2 * 16 + 3) / 4 + 1);
  EXPECT_EQ(combine_blocks(combine_counts(16, 3, 1, 36, 0)), 16 * 4 + (2 * 16 + 3) / 4);
  EXPECT_EQ(combine_blocks(combine_counts(16, 3, 1, 37, 0)), 16 * 4 + (2 * 16 + 7) / 8);
  EXPECT_EQ(combine_blocks(combine_counts(16, 3, 1, 40, 1)), 16 * 4 + (2 * 16 + 7) / 8 + 1);
  // ... 16 warps above (the narrow ones then 16 rows a block).
  EXPECT_EQ(combine_blocks(combine_counts(16, 3, 1, 132, 0)), 16 * 4 + (2 * 16 + 15) / 16);
}

// A batch-invariant plan sums its wide merges in the 16-virtual-warp order (combine.cu,
// combine_wide), whatever block size the widest request of its batch chooses; balanced
// plans keep the warps' own order.
TEST(LaunchChoices, BatchInvariantPlansMergeInTheVirtualWarpOrder) {
  const DecodeConfig config{.heads = 16, .q_len = 1, .kv_dtype = KvDtype::kFp8E4m3, .softmax_scale = 1.f};
  for (const std::vector<int32_t>& seqlens : {std::vector<int32_t>{70000}, std::vector<int32_t>{70000, 130000}}) {
    const auto inv = detail::make_host_impl(
        config, seqlens, PlanOptions{.policy = Policy::kWorkList, .num_ctas = 132, .batch_invariant_split_blocks = 16});
    ASSERT_EQ(inv->host.num_splits[0], 69);  // 1094 blocks in splits of 16
    const CombineParams p = detail::combine_plan_params(*inv);
    ASSERT_GT(p.num_wide_requests, 0);
    EXPECT_TRUE(p.invariant_order);
    // 8 warps for 69 splits alone, 16 beside the 127-split request: the same sums either way.
    EXPECT_EQ(combine_kernel_choice(p).warps, seqlens.size() == 1 ? 8 : 16);
    const std::string combine = detail::describe_decode(*inv, QDtype::kBFloat16).combine;
    EXPECT_NE(combine.find("batch-invariant order"), std::string::npos) << combine;
  }
  const auto balanced = host_plan(16, 1, {70000}, 69);
  ASSERT_EQ(balanced->host.num_splits[0], 69);
  EXPECT_FALSE(detail::combine_plan_params(*balanced).invariant_order);
  const std::string combine = detail::describe_decode(*balanced, QDtype::kBFloat16).combine;
  EXPECT_EQ(combine.find("batch-invariant order"), std::string::npos) << combine;
}

TEST(LaunchChoices, CombineKernelByPartialFormatAndPlan) {
  // fp32 partials (bf16 cache): the general kernels, warps by the widest request.
  CombineParams p = combine_counts(64, 5, 0, 0, 1);
  EXPECT_EQ(combine_kernel_choice(p).warps, 8);
  EXPECT_FALSE(combine_kernel_choice(p).narrow_only);
  // bf16 partials (fp8 caches), a host plan without wide requests: the narrow-only kernel.
  p.partial_format = PartialFormat::kBf16;
  EXPECT_EQ(combine_kernel_choice(p).warps, 8);
  EXPECT_TRUE(combine_kernel_choice(p).narrow_only);
  // ... not for a device-made plan (its counts are capacities) ...
  DevicePlanHeader header{};
  p.header = &header;
  EXPECT_FALSE(combine_kernel_choice(p).narrow_only);
  p.header = nullptr;
  // ... nor with a wide request (4 or 16 warps by its splits, as for fp32 partials).
  p = combine_counts(16, 3, 1, 20, 0);
  p.partial_format = PartialFormat::kBf16;
  EXPECT_EQ(combine_kernel_choice(p).warps, 4);
  EXPECT_FALSE(combine_kernel_choice(p).narrow_only);
  p.max_wide_splits = 132;
  EXPECT_EQ(combine_kernel_choice(p).warps, 16);
  EXPECT_FALSE(combine_kernel_choice(p).narrow_only);
  EXPECT_FALSE(combine_kernel_choice(p).dense);
  // The dense kernel: bf16 partials, wide requests, more blocks than one wave of the
  // general kernel on 132 SMs (six 4-warp or three 8-warp blocks per SM).
  auto bf16_on_132 = [](int rows, int split, int wide, int max_wide_splits) {
    CombineParams q = combine_counts(rows, split, wide, max_wide_splits, 0);
    q.partial_format = PartialFormat::kBf16;
    q.sm_count = 132;
    return q;
  };
  // The GPU test's shapes (GpuSharedWorkspace.DenseWideMergesOfBf16Partials): four 64-row
  // requests of 6000 keys cut 32 ways (4 x 64 x 4 = 1024 4-warp blocks against 792) and
  // three of 20000 cut 40 ways (768 8-warp blocks against 396).
  for (const int32_t keys : {6000, 20000}) {
    const int requests = keys == 6000 ? 4 : 3, splits = keys == 6000 ? 32 : 40;
    const auto plan = host_plan(16, 4, std::vector<int32_t>(size_t(requests), keys), 132);
    for (int b = 0; b < requests; ++b) ASSERT_EQ(plan->host.num_splits[size_t(b)], splits) << keys;
  }
  p = bf16_on_132(64, 4, 4, 32);
  EXPECT_EQ(combine_kernel_choice(p).warps, 4);
  EXPECT_TRUE(combine_kernel_choice(p).dense);
  p.sm_count = 200;  // 1024 blocks in one wave of 6 x 200
  EXPECT_FALSE(combine_kernel_choice(p).dense);
  p.sm_count = 132;
  DevicePlanHeader device_made{};
  p.header = &device_made;  // a device-made plan's counts are capacities: the general kernel
  EXPECT_FALSE(combine_kernel_choice(p).dense);
  p.header = nullptr;
  p.partial_format = PartialFormat::kFp32;
  EXPECT_FALSE(combine_kernel_choice(p).dense);
  p = bf16_on_132(64, 3, 3, 40);
  EXPECT_EQ(combine_kernel_choice(p).warps, 8);
  EXPECT_TRUE(combine_kernel_choice(p).dense);
  p.num_split_requests = p.num_wide_requests = 1;  // 256 blocks: one wave
  EXPECT_FALSE(combine_kernel_choice(p).dense);
  p = bf16_on_132(64, 3, 3, 32);  // three requests of 32 splits: 768 4-warp blocks, one wave
  EXPECT_EQ(combine_kernel_choice(p).warps, 4);
  EXPECT_FALSE(combine_kernel_choice(p).dense);
}

TEST(LaunchChoices, CombineBlocksGetAnSmEachOnlyWhenTheGridFitsTheSms) {
  CombineParams p = combine_counts(16, 1, 1, 132, 0);  // B1: 64 wide blocks
  p.sm_count = 132;
  EXPECT_TRUE(combine_spreads_blocks(p));
  p.sm_count = 64;
  EXPECT_TRUE(combine_spreads_blocks(p));
  p.sm_count = 63;
  EXPECT_FALSE(combine_spreads_blocks(p));
  p.sm_count = 0;  // unknown
  EXPECT_FALSE(combine_spreads_blocks(p));
  p = combine_counts(64, 4, 4, 20, 0);  // B4_Sq4: 1024 wide blocks of 4 warps
  p.sm_count = 132;
  EXPECT_FALSE(combine_spreads_blocks(p));
  p = combine_counts(64, 0, 0, 0, 0);  // nothing to launch
  EXPECT_FALSE(combine_spreads_blocks(p));
}

// The second KV loader warp (kernel.hpp, two_loader_warps; bench/NOTES.md v31): blocks of 4+
// pages by TMA, one CTA per tile. Pages of 32 and more (2 a block: measured level) keep one
// loader; pages below 8 are gathered; 2-CTA clusters multicast.
TEST(LaunchChoices, TwoLoaderWarpsForBlocksOfFourOrMorePages) {
  for (int page_log2 = 0; page_log2 <= 8; ++page_log2) {
    for (const int cluster_size : {1, 2}) {
      sm90::DecodeParams p{};
      p.page_log2 = page_log2;
      p.cluster_size = cluster_size;
      p.gather_rows = page_log2 < 3;  // pages below 8 tokens (both caches' rule at kGatherBelowPage 8)
      const bool want = cluster_size == 1 && (page_log2 == 3 || page_log2 == 4);
      SCOPED_TRACE("page " + std::to_string(1 << page_log2) + ", cluster " + std::to_string(cluster_size));
      EXPECT_EQ(sm90::two_loader_warps(p), want);
    }
  }
}

// A request's tile as the kernel choices see it: rows, d_qk, cluster size and page size
// (the row gather below 8).
sm90::DecodeParams tile_params(int rows, int d_qk, int cluster_size, int page_log2) {
  sm90::DecodeParams p{};
  p.rows = rows;
  p.d_qk = d_qk;
  p.cluster_size = cluster_size;
  p.page_log2 = page_log2;
  p.gather_rows = page_log2 < 3;
  return p;
}

// The bf16 narrow consumers (kernel.hpp, bf16_narrow_tile; bench/NOTES.md v41): tiles of at
// most 16 rows in one CTA, d_qk 576, pages of 32+ tokens loaded by one TMA warp; off with
// KBMLA_BF16_NARROW=never, and a bad value is an error naming it.
TEST(LaunchChoices, Bf16NarrowConsumersForSmallOneLoaderTiles) {
  unsetenv("KBMLA_BF16_NARROW");
  EXPECT_TRUE(sm90::bf16_narrow_tile(tile_params(16, 576, 1, 6)));
  EXPECT_TRUE(sm90::bf16_narrow_tile(tile_params(1, 576, 1, 5)));
  EXPECT_TRUE(sm90::bf16_narrow_tile(tile_params(15, 576, 1, 8)));
  EXPECT_FALSE(sm90::bf16_narrow_tile(tile_params(17, 576, 1, 6)));  // 64-row consumers
  EXPECT_FALSE(sm90::bf16_narrow_tile(tile_params(16, 512, 1, 6)));  // (no d_qk 512 instantiation)
  EXPECT_FALSE(sm90::bf16_narrow_tile(tile_params(16, 576, 1, 4)));  // two loader warps
  EXPECT_FALSE(sm90::bf16_narrow_tile(tile_params(16, 576, 1, 0)));  // row gather
  setenv("KBMLA_BF16_NARROW", "never", 1);
  EXPECT_FALSE(sm90::bf16_narrow_tile(tile_params(16, 576, 1, 6)));
  setenv("KBMLA_BF16_NARROW", "auto", 1);
  EXPECT_TRUE(sm90::bf16_narrow_tile(tile_params(16, 576, 1, 6)));
  setenv("KBMLA_BF16_NARROW", "sometimes", 1);
  try {
    sm90::bf16_narrow_tile(tile_params(16, 576, 1, 6));
    ADD_FAILURE() << "KBMLA_BF16_NARROW=sometimes was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("sometimes"), std::string::npos) << e.what();
  }
  unsetenv("KBMLA_BF16_NARROW");
}

// The split-role kernel (kernel.hpp, fp8_split_roles; bench/NOTES.md v32, v39): per-tensor
// fp8 requests of 17..64 rows in one CTA or of more rows in 2-CTA clusters, pages loaded by
// TMA (8+ tokens).
TEST(LaunchChoices, Fp8SplitRolesForWideOneLoaderTiles) {
  EXPECT_TRUE(sm90::fp8_split_roles(tile_params(64, 576, 1, 6)));
  EXPECT_TRUE(sm90::fp8_split_roles(tile_params(17, 576, 1, 5)));
  EXPECT_TRUE(sm90::fp8_split_roles(tile_params(48, 576, 1, 8)));
  EXPECT_FALSE(sm90::fp8_split_roles(tile_params(65, 576, 1, 8)));  // two tiles: tensor-bound
  EXPECT_FALSE(sm90::fp8_split_roles(tile_params(16, 576, 1, 6)));  // narrow
  EXPECT_TRUE(sm90::fp8_split_roles(tile_params(64, 512, 1, 6)));
  EXPECT_TRUE(sm90::fp8_split_roles(tile_params(128, 576, 2, 6)));  // 2-CTA cluster, 64 rows a CTA
  EXPECT_TRUE(sm90::fp8_split_roles(tile_params(96, 512, 2, 6)));
  EXPECT_FALSE(sm90::fp8_split_roles(tile_params(128, 576, 2, 0)));  // a cluster's row gather
  EXPECT_TRUE(sm90::fp8_split_roles(tile_params(64, 576, 1, 4)));   // two loader warps
  EXPECT_TRUE(sm90::fp8_split_roles(tile_params(64, 576, 1, 3)));
  EXPECT_FALSE(sm90::fp8_split_roles(tile_params(64, 512, 1, 4)));  // (no d_qk 512 two-loader kernel)
  EXPECT_FALSE(sm90::fp8_split_roles(tile_params(64, 576, 1, 0)));  // row gather
}

// The per-block split-role kernel (kernel.hpp, fp8_block_split_roles): per-block requests
// of 17..64 rows in one CTA or of more rows in 2-CTA clusters, pages of 8+ tokens by TMA
// (8 and 16 with two loader warps); the row gather keeps the alternating kernel.
TEST(LaunchChoices, Fp8BlockSplitRolesForWideOneLoaderTiles) {
  auto params = [](int rows, int cluster_size, int page_log2) { return tile_params(rows, 576, cluster_size, page_log2); };
  EXPECT_TRUE(sm90::fp8_block_split_roles(params(64, 1, 6)));
  EXPECT_TRUE(sm90::fp8_block_split_roles(params(17, 1, 5)));
  EXPECT_TRUE(sm90::fp8_block_split_roles(params(48, 1, 8)));
  EXPECT_FALSE(sm90::fp8_block_split_roles(params(16, 1, 6)));   // narrow
  EXPECT_FALSE(sm90::fp8_block_split_roles(params(65, 1, 6)));   // several tiles
  EXPECT_TRUE(sm90::fp8_block_split_roles(params(128, 2, 6)));   // 2-CTA cluster, 64 rows a CTA
  EXPECT_TRUE(sm90::fp8_block_split_roles(params(96, 2, 8)));
  EXPECT_FALSE(sm90::fp8_block_split_roles(params(96, 2, 0)));   // a cluster's row gather
  EXPECT_TRUE(sm90::fp8_block_split_roles(params(64, 1, 4)));    // two loader warps
  EXPECT_TRUE(sm90::fp8_block_split_roles(params(64, 1, 3)));
  EXPECT_FALSE(sm90::fp8_block_split_roles(params(64, 1, 0)));   // row gather
}

// The kernel each call takes (sm90::choose_*_kernel on kernel_choice_params, what the
// launch functions dispatch on) and what describe_decode reports of it.
sm90::KernelChoice chosen(const DevicePlan::Impl& P) {
  const sm90::DecodeParams p = detail::kernel_choice_params(P);
  switch (P.config.kv_dtype) {
    case KvDtype::kBFloat16: return sm90::choose_bf16_kernel(p, sm90::KernelMode::kFull);
    case KvDtype::kFp8E4m3: return sm90::choose_fp8_kernel(p);
    case KvDtype::kFp8E4m3PerBlock: return sm90::choose_fp8_block_kernel(p);
  }
  return {};
}

TEST(DecodePath, KernelChoiceByShapeAndPage) {
  EnvGuard env(nullptr);
  using K = sm90::DecodeKernel;
  const std::vector<int32_t> two = {4096, 700};
  const CacheShape bf16{64, 576, KvDtype::kBFloat16}, block{64, 576, KvDtype::kFp8E4m3PerBlock};
  // bf16: narrow consumers up to 16 rows (TMA pages of 32+), else the 64-row tile; pages of
  // 8 and 16 with two loader warps, below 8 the row gather (which the spike modes lack).
  EXPECT_EQ(chosen(*host_plan(16, 1, two, 132, Policy::kWorkList, 1, bf16)).kernel, K::kBf16Narrow);
  EXPECT_EQ(chosen(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, bf16)).kernel, K::kBf16Tile64);
  EXPECT_EQ(chosen(*host_plan(16, 1, two, 132, Policy::kWorkList, 1, {512 / 32, 576, KvDtype::kBFloat16}))
                .two_loader_warps,
            true);
  EXPECT_EQ(chosen(*host_plan(16, 1, two, 132, Policy::kWorkList, 1, {64, 512, KvDtype::kBFloat16})).kernel,
            K::kBf16Tile64);  // d_qk 512 keeps the 64-row consumers
  {
    const auto plan = host_plan(16, 1, two, 132, Policy::kWorkList, 1, {4, 576, KvDtype::kBFloat16});
    const sm90::DecodeParams p = detail::kernel_choice_params(*plan);
    EXPECT_TRUE(sm90::choose_bf16_kernel(p, sm90::KernelMode::kFull).gather_rows);
    EXPECT_THROW(sm90::choose_bf16_kernel(p, sm90::KernelMode::kLoadOnly), Error);
  }
  // Per-tensor fp8: narrow up to 16 rows, the
  // split-role kernel for 17..64 rows (P V over 32 / 48 / 64) and for 2-CTA clusters, the
  // alternating kernel for the row gather and d_qk 512 with two loader warps.
  {
    const sm90::KernelChoice k = chosen(*host_plan(16, 1, two, 132));
    EXPECT_EQ(k.kernel, K::kFp8Narrow);
  }
  EXPECT_EQ(chosen(*host_plan(16, 4, two, 132)).kernel, K::kFp8Split);
  EXPECT_EQ(chosen(*host_plan(16, 4, two, 132)).pv_rows, 64);
  EXPECT_EQ(chosen(*host_plan(12, 4, two, 132)).pv_rows, 48);
  EXPECT_EQ(chosen(*host_plan(12, 4, two, 132, Policy::kWorkList, 1, {64, 512})).pv_rows, 64);  // d_qk 512
  EXPECT_EQ(chosen(*host_plan(128, 1, two, 132)).kernel, K::kFp8Split);
  EXPECT_EQ(host_plan(128, 1, two, 132)->host.shape.cluster_size, 2);
  EXPECT_TRUE(chosen(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, {16, 576})).two_loader_warps);
  EXPECT_EQ(chosen(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, {16, 512})).kernel, K::kFp8Alternating);
  EXPECT_FALSE(chosen(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, {16, 512})).two_loader_warps);
  EXPECT_TRUE(chosen(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, {4, 576})).gather_rows);
  EXPECT_EQ(chosen(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, {4, 576})).kernel, K::kFp8Alternating);
  {
    EnvGuard roles("never", "KBMLA_FP8_SPLIT_ROLES");
    EXPECT_EQ(chosen(*host_plan(16, 4, two, 132)).kernel, K::kFp8Alternating);
    EXPECT_TRUE(chosen(*host_plan(128, 1, two, 132)).cluster_copies);
  }
  // Per-block: the same rules with its own kernels; d_qk 512 is not supported.
  EXPECT_EQ(chosen(*host_plan(16, 1, two, 132, Policy::kWorkList, 1, block)).kernel, K::kFp8BlockNarrow);
  EXPECT_EQ(chosen(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, block)).kernel, K::kFp8BlockSplit);
  EXPECT_EQ(chosen(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, {4, 576, KvDtype::kFp8E4m3PerBlock})).kernel,
            K::kFp8BlockAlternating);
}

TEST(DecodePath, QAndPOperandsAndTheCombine) {
  EnvGuard env(nullptr);
  const std::vector<int32_t> two = {4096, 700};
  const std::vector<int32_t> many = {300, 900, 64, 2000, 5, 700, 1200};
  const CacheShape bf16{64, 576, KvDtype::kBFloat16}, block{64, 576, KvDtype::kFp8E4m3PerBlock};
  auto path = [](const std::unique_ptr<DevicePlan::Impl>& plan, QDtype q = QDtype::kBFloat16) {
    return detail::describe_decode(*plan, q);
  };
  // Q paths: the caller's, the split-role kernel's staged Q, the consumers', the quantiser.
  using detail::QPath;
  EXPECT_EQ(detail::choose_q_path(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, bf16), QDtype::kBFloat16),
            QPath::kBf16);
  EXPECT_EQ(detail::choose_q_path(*host_plan(16, 4, many, 3), QDtype::kFp8E4m3), QPath::kCallerE4m3);
  EXPECT_EQ(detail::choose_q_path(*host_plan(16, 4, many, 3), QDtype::kBFloat16), QPath::kStaged);
  EXPECT_EQ(detail::choose_q_path(*host_plan(16, 1, many, 3), QDtype::kBFloat16), QPath::kInline);
  EXPECT_EQ(detail::choose_q_path(*host_plan(16, 4, many, 3, Policy::kWorkList, 1, block), QDtype::kBFloat16),
            QPath::kQuantiserKernel);
  EXPECT_EQ(detail::choose_q_path(*host_plan(16, 1, many, 3, Policy::kWorkList, 1, block), QDtype::kBFloat16),
            QPath::kInline);
  // The per-block split-role kernel (17..64 rows, one CTA) quantises in its P V warpgroups
  // when each CTA runs one item (as many CTAs as requests, none split), else takes the
  // quantiser; never in 2-CTA clusters (128 rows), nor with the alternating kernel (page 4:
  // the row gather).
  EXPECT_EQ(detail::choose_q_path(*host_plan(16, 4, {4096, 4096}, 2, Policy::kWorkList, 1, block), QDtype::kBFloat16),
            QPath::kInline);
  EXPECT_NE(path(host_plan(16, 4, {4096, 4096}, 2, Policy::kWorkList, 1, block)).q_operand.find("P V warpgroups"),
            std::string::npos);
  EXPECT_EQ(detail::choose_q_path(*host_plan(12, 4, {4096, 4096}, 2, Policy::kWorkList, 1, block), QDtype::kBFloat16),
            QPath::kInline);
  EXPECT_EQ(detail::choose_q_path(*host_plan(128, 1, {4096, 4096}, 4, Policy::kWorkList, 1, block),
                                  QDtype::kBFloat16),
            QPath::kQuantiserKernel);
  EXPECT_EQ(detail::choose_q_path(*host_plan(16, 4, {4096, 4096}, 2, Policy::kWorkList, 1,
                                             {4, 576, KvDtype::kFp8E4m3PerBlock}),
                                  QDtype::kBFloat16),
            QPath::kQuantiserKernel);
  {
    EnvGuard always("always");
    EXPECT_EQ(detail::choose_q_path(*host_plan(16, 4, many, 3, Policy::kWorkList, 1, block), QDtype::kBFloat16),
              QPath::kInline);
  }
  {
    EnvGuard never("never");
    EXPECT_EQ(detail::choose_q_path(*host_plan(16, 4, {4096, 4096}, 2, Policy::kWorkList, 1, block),
                                    QDtype::kBFloat16),
              QPath::kQuantiserKernel);
  }
  {
    EnvGuard never("never");
    EXPECT_EQ(detail::choose_q_path(*host_plan(16, 4, many, 3), QDtype::kBFloat16), QPath::kQuantiserKernel);
  }
  EXPECT_THROW(detail::choose_q_path(*host_plan(16, 4, two, 132, Policy::kWorkList, 1, bf16), QDtype::kFp8E4m3),
               Error);
  // The per-block cache takes the caller's e4m3 Q too (its latent part, the rope in bf16),
  // on every kernel and plan shape: no quantiser, no in-kernel quantisation.
  for (const auto& plan : {host_plan(16, 4, two, 132, Policy::kWorkList, 1, block),
                           host_plan(16, 1, many, 3, Policy::kWorkList, 1, block),
                           host_plan(128, 1, two, 4, Policy::kWorkList, 1, block)}) {
    EXPECT_EQ(detail::choose_q_path(*plan, QDtype::kFp8E4m3), QPath::kCallerE4m3);
    EXPECT_EQ(path(plan, QDtype::kFp8E4m3).q_operand, "latent e4m3 (the caller's, one scale); rope bf16 (the caller's q_pe)");
  }
  // The accuracy class: every fp8 kernel takes Q and P as e4m3, the bf16 one neither.
  const DecodePath b = path(host_plan(16, 4, two, 132, Policy::kWorkList, 1, bf16));
  EXPECT_FALSE(b.fp8_products);
  EXPECT_EQ(b.p_operand, "bf16");
  EXPECT_EQ(b.cta_rows, 64);
  const DecodePath t = path(host_plan(16, 1, two, 132));
  EXPECT_TRUE(t.fp8_products);
  EXPECT_EQ(t.cta_rows, 16);
  EXPECT_NE(t.kv_loader.find("parts of 64 tokens"), std::string::npos) << t.kv_loader;
  EXPECT_NE(t.q_operand.find("quantised by the decode's consumers"), std::string::npos) << t.q_operand;
  EXPECT_TRUE(path(host_plan(16, 4, two, 132, Policy::kWorkList, 1, block)).fp8_products);
  // The per-block split kernel scales V by the group factors and has one P tile; the
  // alternating kernel (two consumers) a P tile per group.
  EXPECT_NE(path(host_plan(16, 4, two, 132, Policy::kWorkList, 1, block)).p_operand.find("one tile"), std::string::npos);
  EXPECT_NE(path(host_plan(16, 4, two, 132, Policy::kWorkList, 1, {4, 576, KvDtype::kFp8E4m3PerBlock})).p_operand.find(
                "a tile per 128-column group"),
            std::string::npos);
  const DecodePath c = path(host_plan(128, 1, two, 132));
  EXPECT_EQ(c.cluster_size, 2);
  EXPECT_EQ(c.cta_rows, 64);
  EXPECT_NE(c.summary().find("2-CTA clusters"), std::string::npos) << c.summary();
  EXPECT_NE(path(host_plan(16, 4, two, 132, Policy::kWorkList, 1, {4, 576})).kv_loader.find("row gather"),
            std::string::npos);
  // The combine: none when no request is split, else the merge kernel's grid.
  EXPECT_EQ(path(host_plan(16, 1, {4096, 4096}, 132, Policy::kStatic, 1)).combine, "none (no split request)");
  const DecodePath split = path(host_plan(16, 1, {131072}, 132));
  EXPECT_NE(split.combine.find("merge kernel"), std::string::npos) << split.combine;
  // Early merges: work-list plans with a whole request beside the split ones and a merge
  // grid of one wave, not a plan of pieces only (one long request), not the static policies,
  // not with KBMLA_EARLY_COMBINE=never.
  EXPECT_EQ(split.combine.find("early merges"), std::string::npos) << split.combine;
  auto on_132_sms = [](std::unique_ptr<DevicePlan::Impl> plan) {  // (the CPU knows no device)
    plan->device_sm_count = 132;
    return plan;
  };
  const DecodePath mixed = path(on_132_sms(host_plan(16, 1, {131072, 60, 100}, 132)));
  EXPECT_NE(mixed.combine.find("early merges"), std::string::npos) << mixed.combine;
  const DecodePath fixed = path(on_132_sms(host_plan(16, 1, {131072, 60, 100}, 132, Policy::kStaticPersistent, 4)));
  EXPECT_EQ(fixed.combine.find("early merges"), std::string::npos) << fixed.combine;
  // 32 requests of 384 rows, most split: a merge grid of several waves.
  std::vector<int32_t> many_rows(32, 20000);
  many_rows.push_back(40);
  const DecodePath waves = path(on_132_sms(host_plan(96, 4, many_rows, 132)));
  EXPECT_EQ(waves.combine.find("early merges"), std::string::npos) << waves.combine;
  EXPECT_NE(waves.combine.find("merge kernel"), std::string::npos) << waves.combine;
  {
    EnvGuard never("never", "KBMLA_EARLY_COMBINE");
    const DecodePath off = path(on_132_sms(host_plan(16, 1, {131072, 60, 100}, 132)));
    EXPECT_EQ(off.combine.find("early merges"), std::string::npos) << off.combine;
  }
}

}  // namespace
}  // namespace kbmla
