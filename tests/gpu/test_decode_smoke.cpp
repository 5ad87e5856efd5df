// GPU smoke tier (seconds): one case per policy and the error paths.
#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

TEST(GpuSmoke, Kimi16HeadsQLen4EveryPolicy) {
  KBMLA_REQUIRE_SM90();
  for (Policy policy : {Policy::kWorkList, Policy::kStatic, Policy::kStaticPersistent}) {
    GpuCase c{16, 4, {0, 1, 63, 64, 65, 700, 3000}, policy};
    expect_accurate(c, run_gpu_case(c));
  }
}

TEST(GpuSmoke, OneHeadOneTokenSingleBlock) {
  KBMLA_REQUIRE_SM90();
  GpuCase c{1, 1, {5}};
  expect_accurate(c, run_gpu_case(c));
}

TEST(GpuSmoke, ManyHeadsUseTwoCtaTiles) {
  KBMLA_REQUIRE_SM90();
  GpuCase c{128, 2, {100, 2000}};
  expect_accurate(c, run_gpu_case(c));
}

TEST(GpuSmoke, LongRequestIsSplitAndCombined) {
  KBMLA_REQUIRE_SM90();
  GpuCase c{16, 1, {32768, 10}};
  expect_accurate(c, run_gpu_case(c));
}

TEST(GpuSmoke, HostRejectsBadArgumentsBeforeLaunch) {
  KBMLA_REQUIRE_SM90();
  DecodeConfig config;
  config.softmax_scale = 0.1f;
  std::vector<int32_t> seqlens = {10};
  DevicePlan plan = DevicePlan::create(config, seqlens);
  DeviceArray<ref::Bf16> cache(64 * 576);
  KvCache kv(cache.ptr, 1, 64);
  DecodeArgs args;
  EXPECT_THROW(decode(plan, kv, args), Error);  // null q
  config.page_size = 48;
  EXPECT_THROW(DevicePlan::create(config, seqlens), Error);
  config.page_size = 64;
  config.heads = 129;
  EXPECT_THROW(DevicePlan::create(config, seqlens), Error);
  EXPECT_THROW(KvCache(cache.ptr, 0, 64), Error);
  EXPECT_THROW(KvCache(cache.ptr, 1, 96), Error);
  EXPECT_NO_THROW(KvCache(cache.ptr, 64, 1));
}

TEST(GpuSmoke, PagedSmallAndLargePages) {
  KBMLA_REQUIRE_SM90();
  // One token per page (64 boxes of one row per stage), 16 in a 2-CTA cluster (multicast
  // of small pages), 256 (four 64-token parts per page); seqlens end inside pages.
  const std::pair<int, GpuCase> cases[] = {
      {1, {16, 4, {0, 1, 65, 130}}}, {16, {128, 1, {100, 17, 33}}}, {256, {16, 2, {300, 255, 1}}}};
  for (auto [page_size, c] : cases) {
    c.page_size = page_size;
    expect_accurate(c, run_gpu_case(c));
  }
}

TEST(GpuSmoke, Fp8CacheMatchesTheDequantisedReference) {
  KBMLA_REQUIRE_SM90();
  for (GpuCase c : {GpuCase{16, 4, {0, 1, 65, 700, 3000}}, GpuCase{128, 1, {100, 1000}}}) {
    c.fp8 = true;
    expect_accurate(c, run_gpu_case(c));
  }
}

// The per-block-scale cache (656-byte tokens): scales that differ per token and group
// (the running group maxima grow inside items), NaN-poisoned rows past the last token,
// one and two CTAs per q tile, q_len 4 with the causal tail, a split request.
TEST(GpuSmoke, Fp8BlockCacheMatchesTheDequantisedReference) {
  KBMLA_REQUIRE_SM90();
  for (GpuCase c : {GpuCase{16, 4, {0, 1, 65, 700, 3000}}, GpuCase{128, 1, {100, 1000}}, GpuCase{16, 1, {20000}}}) {
    c.fp8_block = true;
    expect_accurate(c, run_gpu_case(c));
    // Scales of any value (amax / 448, not powers of two).
    c.fp8_block_any_scales = true;
    expect_accurate(c, run_gpu_case(c));
  }
}

// Q given in e4m3 with its own scale (no quantiser): one and two CTAs per q tile, q_len 4
// with the causal tail, d_qk 512, a split request.
TEST(GpuSmoke, Fp8QGivenInE4m3MatchesTheReference) {
  KBMLA_REQUIRE_SM90();
  GpuCase no_rope{16, 1, {3000, 70}};
  no_rope.d_qk = 512;
  for (GpuCase c : {GpuCase{16, 4, {0, 1, 65, 700, 3000}}, GpuCase{128, 1, {100, 1000}}, no_rope}) {
    c.fp8 = true;
    c.fp8_q = true;
    expect_accurate(c, run_gpu_case(c));
  }
}

TEST(GpuSmoke, PagedDeviceSideErrorsOnALaterSmallPage) {
  KBMLA_REQUIRE_SM90();
  // Page size 16: the third page of request 0 (not its first, the one read before the
  // stage wait) is out of range. No fault; the error word names it.
  DecodeConfig config;
  config.softmax_scale = 0.1f;
  config.page_size = 16;
  std::vector<int32_t> seqlens_host = {60};
  DevicePlan plan = DevicePlan::create(config, seqlens_host);
  DeviceArray<ref::Bf16> q(16 * 576), cache(4 * 16 * 576), out(16 * 512);
  q.poison();
  cache.poison();
  std::vector<int32_t> bt = {0, 1, -5, 3};
  DeviceArray<int32_t> block_table(bt), seqlens(seqlens_host);
  DeviceArray<float> lse(16);
  DeviceArray<uint8_t> ws(plan.workspace_bytes());
  init_workspace(ws.ptr, ws.count, nullptr);
  KvCache kv(cache.ptr, 4, 16);
  DecodeArgs args = make_decode_args(q.ptr, block_table.ptr, 4, seqlens.ptr, out.ptr, lse.ptr, ws.ptr, ws.count);
  decode(plan, kv, args);
  const uint32_t bits = read_device_errors(ws.ptr, nullptr);
  EXPECT_EQ(bits, uint32_t(kErrPageIndexOutOfRange)) << describe_device_errors(bits);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

TEST(GpuSmoke, DeviceSideErrorsAreReportedNotFaulted) {
  KBMLA_REQUIRE_SM90();
  // A block-table entry out of range and a seqlen beyond the block table: the kernel
  // must not fault, and the error word must name both.
  DecodeConfig config;
  config.softmax_scale = 0.1f;
  std::vector<int32_t> plan_seqlens = {100, 64};
  DevicePlan plan = DevicePlan::create(config, plan_seqlens);
  DeviceArray<ref::Bf16> q(2 * 16 * 576), cache(4 * 64 * 576), out(2 * 16 * 512);
  q.poison();
  cache.poison();
  std::vector<int32_t> bt = {0, 1 << 30, 2, 3};  // request 0's second page is out of range
  std::vector<int32_t> device_seqlens = {100, 1000};  // request 1 beyond its 2 pages
  DeviceArray<int32_t> block_table(bt), seqlens(device_seqlens);
  DeviceArray<float> lse(2 * 16);
  DeviceArray<uint8_t> ws(plan.workspace_bytes());
  init_workspace(ws.ptr, ws.count, nullptr);
  KvCache kv(cache.ptr, 4, 64);
  DecodeArgs args = make_decode_args(q.ptr, block_table.ptr, 2, seqlens.ptr, out.ptr, lse.ptr, ws.ptr, ws.count);
  decode(plan, kv, args);
  const uint32_t bits = read_device_errors(ws.ptr, nullptr);
  EXPECT_TRUE(bits & kErrPageIndexOutOfRange) << describe_device_errors(bits);
  EXPECT_TRUE(bits & kErrSeqlenBeyondBlockTable) << describe_device_errors(bits);
  args.debug_sync = true;
  EXPECT_THROW(decode(plan, kv, args), Error);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

}  // namespace
}  // namespace kbmla::test
