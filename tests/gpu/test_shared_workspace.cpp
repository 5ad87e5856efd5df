// One poisoned workspace shared by plans of other layouts (as an engine shares one
// across batch shapes and layers), and CTA budgets so small that each CTA holds many
// split items: every call still matches the reference and reports no device error.
#include <cstdlib>
#include <cstring>

#include "kbmla/work_format.hpp"
#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

struct Prepared {
  ref::RandomProblem<ref::Bf16> data;
  DevicePlan plan;
  ref::Outputs expect;
};

Prepared prepare(int heads, int q_len, const std::vector<int32_t>& seqlens, int num_ctas, uint64_t seed) {
  ref::Problem shape;
  shape.batch = int(seqlens.size());
  shape.q_len = q_len;
  shape.heads = heads;
  shape.scale = 1.0 / std::sqrt(192.0);
  auto data = ref::make_random_problem<ref::Bf16>(shape, seqlens, seed);
  DevicePlan plan = make_bf16_plan(heads, q_len, seqlens, num_ctas, shape.scale);
  ref::Outputs expect = ref::reference_decode(data.problem, data.inputs());
  return Prepared{std::move(data), std::move(plan), std::move(expect)};
}

// Decodes `p` into poisoned outputs with the shared workspace and checks the result; adds 1
// to `early_calls` when the call took early merges (describe_decode).
void decode_and_check(const Prepared& p, DeviceArray<uint8_t>& ws, const char* what, int& early_calls) {
  SCOPED_TRACE(what);
  ASSERT_GE(ws.count, p.plan.workspace_bytes());
  const ref::Problem& pr = p.data.problem;
  DeviceArray<ref::Bf16> q(p.data.q), cache(p.data.cache);
  DeviceArray<int32_t> block_table(p.data.block_table), seqlens(p.data.seqlens);
  DeviceArray<ref::Bf16> out(size_t(pr.batch) * pr.q_len * pr.heads * 512);
  DeviceArray<float> lse(size_t(pr.batch) * pr.q_len * pr.heads);
  out.poison();
  lse.poison();
  KvCache kv(cache.ptr, pr.num_pages, pr.page_size);
  if (describe_decode(p.plan, kv).combine.find("early merges") != std::string::npos) ++early_calls;
  decode(p.plan, kv,
         make_decode_args(q.ptr, block_table.ptr, pr.max_pages, seqlens.ptr, out.ptr, lse.ptr, ws.ptr, ws.count));
  EXPECT_EQ(read_device_errors(ws.ptr, nullptr), 0u);
  expect_within_bars(compare_with_reference(pr, p.expect, out, lse), /*fp8=*/false);
}

TEST(GpuSharedWorkspace, PlansOfOtherLayoutsShareOnePoisonedWorkspace) {
  KBMLA_REQUIRE_SM90();
  // A: narrow splits of 64-row tiles, unsplit and empty requests; B: a request cut into
  // more than 16 splits (the wide combine) and narrow ones, with its partials where A's
  // lay and the other way round.
  const Prepared a = prepare(16, 4, {20000, 300, 9000, 64, 0}, 0, 3);
  const Prepared b = prepare(16, 1, {40000, 3000, 2000, 5000, 30}, 0, 4);  // (30: one whole request)
  ASSERT_GT(a.plan.host_plan().counts.num_slots, 0);
  ASSERT_GT(b.plan.host_plan().counts.num_slots, 16);
  DeviceArray<uint8_t> ws(std::max(a.plan.workspace_bytes(), b.plan.workspace_bytes()));
  ws.poison();
  init_workspace(ws.ptr, ws.count, nullptr);
  const CombineSync before = read_combine_sync(ws.ptr);
  EXPECT_EQ(before.ready, kCombineSyncReady);
  int early_calls = 0;
  decode_and_check(a, ws, "A", early_calls);
  decode_and_check(b, ws, "B after A", early_calls);
  decode_and_check(a, ws, "A after B", early_calls);
  decode_and_check(a, ws, "A again", early_calls);
  decode_and_check(b, ws, "B again", early_calls);
  // Early merges over the other plan's flags and partials (B's at least; A's 64-row merges
  // are more than one wave on 132 SMs): each such call found its own flags (none waited for
  // the whole decode) and advanced the epoch once.
  EXPECT_GE(early_calls, 2);
  const CombineSync after = read_combine_sync(ws.ptr);
  EXPECT_EQ(after.fallbacks, 0u);
  EXPECT_EQ(after.arrivals, 0u);
  EXPECT_EQ(after.epoch, before.epoch + uint64_t(early_calls));
}

// Early merges (combine.cu): the combine merges each split request as soon as the decode
// flagged its pieces. The merge is the same arithmetic in the same order as after a wait
// for the whole decode (KBMLA_EARLY_COMBINE=never), so the outputs must match bit for bit;
// every wait must find its flags (no fallback), and the call advances the epoch by one.
// Plans whose every item is a piece of a split request keep the grid wait (launch_choices.cpp):
// there the epoch stays. Kernels: bf16 64-row and narrow tiles (wide merges among them),
// per-tensor fp8 narrow and split-role tiles, per-block fp8, 2-CTA clusters with two q tiles
// a request and (per-tensor) two 48-row slices of one.
TEST(GpuSharedWorkspace, EarlyMergesMatchTheWholeDecodeWaitBitForBit) {
  KBMLA_REQUIRE_SM90();
  const RestoreEnvOnExit restore("KBMLA_EARLY_COMBINE");
  // {case, whether its plan takes early merges}; the short requests stay whole, and the
  // 64-row batches run on 24 CTAs, so that their merges are narrow and one wave.
  std::vector<std::pair<GpuCase, bool>> cases;
  GpuCase bf16_wide{16, 4, {20000, 300, 9000, 64, 0, 4100, 50, 70}};
  bf16_wide.num_ctas = 24;
  cases.push_back({bf16_wide, true});
  cases.push_back({GpuCase{16, 1, {131072}}, false});  // one request: every item a piece
  cases.push_back({GpuCase{16, 1, {131072, 60, 100, 1, 65, 30}}, true});  // a 130-way wide merge
  cases.push_back({GpuCase{16, 1, {40000, 3000, 2000, 5000, 1, 65}}, true});
  GpuCase fp8_narrow{16, 1, {30000, 5000, 4096, 1, 700, 40}};
  fp8_narrow.fp8 = true;
  cases.push_back({fp8_narrow, true});
  GpuCase fp8_wide{16, 4, {30000, 5000, 4096, 700, 9000, 20, 33}};
  fp8_wide.fp8 = true;
  fp8_wide.num_ctas = 24;
  cases.push_back({fp8_wide, true});
  GpuCase block{16, 4, {30000, 5000, 4096, 700, 9000, 20, 33}};
  block.fp8_block = true;
  block.num_ctas = 24;
  cases.push_back({block, true});
  GpuCase merges_in_waves = fp8_wide;  // 524 merge blocks of 16 warps on 132 SMs: the grid wait
  merges_in_waves.num_ctas = 0;
  cases.push_back({merges_in_waves, false});
  GpuCase clusters{128, 2, {9000, 2500, 700, 40}};
  clusters.num_ctas = 24;
  cases.push_back({clusters, true});
  // 96 rows in 2-CTA tiles: two 48-row slices (a flag each) on the per-tensor split-role
  // kernel, 64 + 32 on the per-block one.
  GpuCase sliced{24, 4, {9000, 2500, 700, 40}};
  sliced.num_ctas = 24;
  sliced.fp8 = true;
  cases.push_back({sliced, true});
  sliced.fp8 = false;
  sliced.fp8_block = true;
  cases.push_back({sliced, true});
  for (const auto& [c, takes_early] : cases) {
    SCOPED_TRACE(describe(c));
    setenv("KBMLA_EARLY_COMBINE", "never", 1);
    const GpuResult whole = run_gpu_case(c);
    unsetenv("KBMLA_EARLY_COMBINE");
    const GpuResult early = run_gpu_case(c);
    expect_accurate(c, early);
    EXPECT_EQ(early.path.combine.find("early merges") != std::string::npos, takes_early) << early.path.combine;
    if (c.fp8 && c.heads * c.q_len == 96) {
      EXPECT_EQ(early.path.cta_rows, kSlicedCtaRows) << "the sliced batch: two flags a tile";
    }
    EXPECT_EQ(whole.path.combine.find("early merges"), std::string::npos) << whole.path.combine;
    EXPECT_EQ(early.sync_after.fallbacks, 0u);
    EXPECT_EQ(early.sync_after.arrivals, 0u);
    EXPECT_EQ(early.sync_after.epoch, early.sync_before.epoch + (takes_early ? 1 : 0));
    EXPECT_EQ(whole.sync_after.epoch, whole.sync_before.epoch);  // no early merges: untouched
    ASSERT_EQ(early.out.size(), whole.out.size());
    EXPECT_EQ(std::memcmp(early.out.data(), whole.out.data(), early.out.size() * sizeof(ref::Bf16)), 0);
    EXPECT_EQ(std::memcmp(early.lse.data(), whole.lse.data(), early.lse.size() * sizeof(float)), 0);
  }
}

TEST(GpuSharedWorkspace, FewCtasEachHoldingManySplitItems) {
  KBMLA_REQUIRE_SM90();
  for (int ctas : {1, 3, 8}) {  // 1: one CTA walks the whole batch unsplit
    GpuCase c{16, 2, {3000, 5000, 1, 4096, 700, 2500, 9000, 64, 65, 1200}};
    c.num_ctas = ctas;
    expect_accurate(c, run_gpu_case(c));
  }
  GpuCase fp8{16, 4, {3000, 5000, 4096, 700, 9000}};
  fp8.num_ctas = 5;
  fp8.fp8 = true;
  expect_accurate(fp8, run_gpu_case(fp8));
  GpuCase block{12, 4, {3000, 5000, 4096, 700, 9000}};
  block.num_ctas = 5;
  block.fp8_block = true;
  expect_accurate(block, run_gpu_case(block));
  GpuCase clusters{128, 2, {3000, 2500, 700}};  // 2-CTA clusters, two q tiles per request
  clusters.num_ctas = 6;
  expect_accurate(clusters, run_gpu_case(clusters));
}

// Requests split 17..36 ways (combine blocks of 4 warps) and 37..72 ways (8 warps), 16 and
// 64 rows: every block shape of the combine's wide merge against the reference.
TEST(GpuSharedWorkspace, WideMergesOfEveryBlockShape) {
  KBMLA_REQUIRE_SM90();
  for (int ctas : {40, 100}) {
    for (int q_len : {1, 4}) {
      GpuCase c{16, q_len, {20000, 19000, 300, 5}};
      c.num_ctas = ctas;
      expect_accurate(c, run_gpu_case(c));
    }
  }
}

// The dense combine kernels (combine.cu, combine_kernel_choice): the fp8 caches' bf16
// partials with wide requests whose general grid is more than one wave. On 132 SMs, four
// 64-row requests of 6000 keys are cut 32 ways (1024 blocks of 4 warps against 6 x 132) and
// three of 20000 keys 40 ways (768 blocks of 8 warps against 3 x 132), so both dense forms
// run (LaunchChoices.CombineKernelByPartialFormatAndPlan pins the cuts and the choice);
// both fp8 formats, against the reference.
TEST(GpuSharedWorkspace, DenseWideMergesOfBf16Partials) {
  KBMLA_REQUIRE_SM90();
  for (int requests : {4, 3}) {
    for (bool per_block : {false, true}) {
      GpuCase c{16, 4, std::vector<int32_t>(size_t(requests), requests == 4 ? 6000 : 20000)};
      c.fp8 = !per_block;
      c.fp8_block = per_block;
      c.seed = uint64_t(10 + requests);
      expect_accurate(c, run_gpu_case(c));
    }
  }
}

// The fp8 kernels take a bf16 Q two ways (decode_api.cpp, fp8_quantises_q_in_kernel): their
// consumers quantise each item's Q tile, or the quantiser kernel does it for the TMA. Both
// must compute the same e4m3 bytes, so the same outputs, here on plans with many items per
// CTA (per-tensor: 64-row and 16-row tiles, d_qk 576 and 512; per-block: 16-row tiles),
// where the automatic choice would take only one of the ways.
TEST(GpuSharedWorkspace, Fp8QQuantisedByTheConsumersOrTheQuantiserAlike) {
  KBMLA_REQUIRE_SM90();
  const RestoreEnvOnExit restore("KBMLA_Q_INLINE");
  std::vector<GpuCase> cases;
  GpuCase wide{16, 4, {3000, 5000, 4096, 1, 700, 9000, 130}};
  wide.num_ctas = 5;
  cases.push_back(wide);
  GpuCase narrow{16, 1, {3000, 5000, 4096, 1, 700, 9000, 130, 64, 65}};
  narrow.num_ctas = 3;
  cases.push_back(narrow);
  GpuCase no_rope{12, 4, {2500, 64, 4000, 900}};
  no_rope.num_ctas = 2;
  no_rope.d_qk = 512;
  cases.push_back(no_rope);
  for (GpuCase& c : cases) c.fp8 = true;
  GpuCase block{8, 2, {3000, 5000, 4096, 1, 700, 9000, 130}};
  block.num_ctas = 3;
  block.fp8_block = true;
  block.fp8_block_any_scales = true;
  cases.push_back(block);
  for (const GpuCase& c : cases) {
    setenv("KBMLA_Q_INLINE", "always", 1);
    const GpuResult in_kernel = run_gpu_case(c);
    expect_accurate(c, in_kernel);
    setenv("KBMLA_Q_INLINE", "never", 1);
    const GpuResult quantiser = run_gpu_case(c);
    expect_accurate(c, quantiser);
    EXPECT_EQ(in_kernel.cmp.rel_frobenius, quantiser.cmp.rel_frobenius) << describe(c);
    EXPECT_EQ(in_kernel.cmp.worst_row_rel, quantiser.cmp.worst_row_rel) << describe(c);
    EXPECT_EQ(in_kernel.cmp.lse_max_abs, quantiser.cmp.lse_max_abs) << describe(c);
  }
}

}  // namespace
}  // namespace kbmla::test
