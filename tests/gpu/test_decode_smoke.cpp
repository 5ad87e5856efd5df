// GPU smoke tier (seconds): one case per policy and the error paths.
#include <cstring>

#include "kbmla/work_format.hpp"
#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

// `tokens` per-block-scale cache rows (656 bytes) that decode to 1.0 everywhere: e4m3 1.0
// (0x38), four fp32 scales of 1.0, the 64 rope values bf16 1.0.
std::vector<uint8_t> per_block_rows_of_ones(size_t tokens) {
  std::vector<uint8_t> rows(tokens * 656, 0x38);
  const float one = 1.f;
  const ref::Bf16 b = ref::float_to_bf16(1.f);
  for (size_t t = 0; t < tokens; ++t) {
    uint8_t* row = rows.data() + t * 656;
    for (int g = 0; g < 4; ++g) std::memcpy(row + 512 + 4 * g, &one, 4);
    for (int d = 0; d < 64; ++d) std::memcpy(row + 528 + 2 * d, &b, 2);
  }
  return rows;
}

// After a call whose one item met an out-of-range page: the error word names exactly that,
// every output element is 0 and every LSE row -inf, and the device is still usable.
void expect_page_error_and_empty_output(const DeviceArray<uint8_t>& ws, const DeviceArray<ref::Bf16>& out,
                                        const DeviceArray<float>& lse) {
  const uint32_t bits = read_device_errors(ws.ptr, nullptr);
  EXPECT_EQ(bits, uint32_t(kErrPageIndexOutOfRange)) << describe_device_errors(bits);
  const std::vector<ref::Bf16> o = out.download();
  for (size_t i = 0; i < o.size(); ++i) {
    ASSERT_EQ(ref::bf16_to_float(o[i]), 0.f) << "output element " << i;
  }
  const std::vector<float> l = lse.download();
  for (size_t r = 0; r < l.size(); ++r) EXPECT_TRUE(std::isinf(l[r]) && l[r] < 0) << "lse row " << r << ": " << l[r];
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
}

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

// Pages of 8 and 16 tokens in the three caches: blocks of 4 and 8 parts, whose odd parts a
// second producer warp loads (kernel.hpp, two_loader_warps); seqlens that end inside a page
// and leave the last block 1..7 parts, so one warp has no part in some blocks.
TEST(GpuSmoke, PagesOf8And16TokensTwoLoaderWarps) {
  KBMLA_REQUIRE_SM90();
  for (const int page_size : {8, 16}) {
    for (const int dtype : {0, 1, 2}) {  // bf16, fp8, fp8 per-block
      for (GpuCase c : {GpuCase{16, 1, {1, 17, 40, 100, 1000}}, GpuCase{16, 4, {50, 9, 700}}}) {
        c.page_size = page_size;
        c.fp8 = dtype == 1;
        c.fp8_block = dtype == 2;
        SCOPED_TRACE(describe(c));
        expect_accurate(c, run_gpu_case(c));
      }
    }
  }
}

// An out-of-range page among the parts the second loader warp issues (page 1 of 4 in the
// block) and among warp 0's (page 2): the error word names it and the item's output is
// zeros (the stage flag each warp sets reaches the consumers), in the three caches.
TEST(GpuSmoke, DeviceSideErrorOnEitherLoaderWarpsPage) {
  KBMLA_REQUIRE_SM90();
  for (const KvDtype dtype : {KvDtype::kBFloat16, KvDtype::kFp8E4m3, KvDtype::kFp8E4m3PerBlock}) {
    for (const int bad_page : {1, 2}) {
      SCOPED_TRACE(std::string(kv_dtype_name(dtype)) + " bad page " + std::to_string(bad_page));
      const bool per_block = dtype == KvDtype::kFp8E4m3PerBlock;
      const bool bf16 = dtype == KvDtype::kBFloat16;
      DecodeConfig config;
      config.softmax_scale = 0.1f;
      config.page_size = 16;
      config.kv_dtype = dtype;
      std::vector<int32_t> seqlens_host = {60};
      DevicePlan plan = DevicePlan::create(config, seqlens_host);
      const int token_bytes = bf16 ? 1152 : per_block ? 656 : 576;
      DeviceArray<ref::Bf16> q(std::vector<ref::Bf16>(16 * 576, ref::float_to_bf16(0.5f)));
      // e4m3 0x38 = 1.0; per-block rows: 512 values, four fp32 scales of 1.0, 64 bf16 of 1.0;
      // bf16: 0x3f80 = 1.0 (little-endian bytes 0x80, 0x3f).
      std::vector<uint8_t> cache_host =
          per_block ? per_block_rows_of_ones(4 * 16) : std::vector<uint8_t>(size_t(4) * 16 * token_bytes, 0x38);
      if (bf16) {
        for (size_t i = 0; i < cache_host.size(); i += 2) cache_host[i] = 0x80, cache_host[i + 1] = 0x3f;
      }
      DeviceArray<uint8_t> cache(cache_host);
      DeviceArray<ref::Bf16> out(16 * 512);
      out.poison();
      std::vector<int32_t> bt = {0, 1, 2, 3};
      bt[size_t(bad_page)] = 1 << 20;
      DeviceArray<int32_t> block_table(bt), seqlens(seqlens_host);
      DeviceArray<float> lse(16);
      DeviceArray<float> kv_scale(std::vector<float>{1.f});
      DeviceArray<uint8_t> ws(plan.workspace_bytes());
      init_workspace(ws.ptr, ws.count, nullptr);
      KvCache kv(cache.ptr, 4, 16, 576, config.kv_dtype);
      DecodeArgs args = make_decode_args(q.ptr, block_table.ptr, 4, seqlens.ptr, out.ptr, lse.ptr, ws.ptr, ws.count);
      if (dtype == KvDtype::kFp8E4m3) args.kv_scale = kv_scale.ptr;
      decode(plan, kv, args);
      expect_page_error_and_empty_output(ws, out, lse);
    }
  }
}

// Tiles of 17..64 rows for the split-role kernels: several items per CTA, split requests,
// q_len 4 with the causal tail, 64 / 48 / 32 rows, pages of 32 and 128, a seqlen of 0.
std::vector<GpuCase> split_role_cases() {
  GpuCase many{16, 4, {0, 1, 65, 700, 3000, 64, 129, 5000}};
  many.num_ctas = 5;
  GpuCase paged{48, 1, {100, 1000, 4097}};
  paged.page_size = 32;
  GpuCase big_pages{12, 4, {300, 2000, 77}};
  big_pages.page_size = 128;
  GpuCase few_ctas{8, 4, {900, 33, 1500}};
  few_ctas.num_ctas = 3;
  // 2-CTA clusters (more than 64 rows, the KV multicast; v39): 96 rows (the second CTA
  // half padding), 256 rows in two cluster tiles with the causal tail, several items per
  // cluster under a small budget.
  GpuCase cluster_96{96, 1, {700, 65, 1, 3000}};
  GpuCase cluster_tiles{64, 4, {500, 1300}};
  GpuCase cluster_items{12, 9, {2000, 130, 64 * 9 + 1}};
  cluster_items.num_ctas = 6;
  // 130 rows: the second cluster tile's second CTA has no row of the request (it loads its
  // half of every box for its peer and writes nothing).
  GpuCase cluster_empty_cta{65, 2, {900, 65, 1}};
  // Clusters over pages of 16 and 8 tokens (one loader warp: parts of a page by lanes,
  // multicast).
  GpuCase cluster_pages_16{128, 1, {700, 65, 1}};
  cluster_pages_16.page_size = 16;
  GpuCase cluster_pages_8{96, 2, {300, 9}};
  cluster_pages_8.page_size = 8;
  // Tiles of 65..96 rows (per-tensor: in two slices of 48, kernel.hpp cluster_cta_rows;
  // cluster_96 is one too): 80 rows (48 + 32) with the causal tail, 65 rows (48 + 17) with
  // several items per cluster.
  GpuCase cluster_80{20, 4, {2500, 40, 1, 3100}};
  GpuCase cluster_65{65, 1, {1500, 7, 640}};
  cluster_65.num_ctas = 6;
  return {many,          paged,         big_pages,         few_ctas,         cluster_96,     cluster_tiles,
          cluster_items, cluster_empty_cta, cluster_pages_16, cluster_pages_8, cluster_80, cluster_65};
}

// One-CTA tiles over pages of 16 and 8 tokens (two loader warps; P V over 64, 48 and 32
// rows), for both split-role kernels' tests.
std::vector<GpuCase> split_role_small_page_cases() {
  GpuCase pages_of_16{16, 4, {1000, 61, 2049}};  // two loader warps; 1..7-part last blocks
  pages_of_16.page_size = 16;
  GpuCase pages_of_16_32{16, 2, {700, 1301}};
  pages_of_16_32.page_size = 16;
  GpuCase pages_of_8{12, 4, {500, 9}};
  pages_of_8.page_size = 8;
  return {pages_of_16, pages_of_16_32, pages_of_8};
}

// The split-role kernel (per-tensor fp8 tiles of 17..64 rows, kernel_fp8_split.cu) with Q
// quantised by the quantiser (KBMLA_Q_INLINE=never) and staged by TMA and quantised by its
// softmax warpgroup (always, auto's choice: q_staged_fp8.cuh): split_role_cases (several
// items per CTA), pages of 8 and 16 (two loader warps), an e4m3 Q, d_qk 512; 64-, 48- and
// 32-row tiles in each (P V over 48 or 32 rows with d_qk 576: with_split_pv_acc), and
// 2-CTA clusters of 64 rows a CTA or (65..96 rows) two slices of 48.
TEST(GpuSmoke, Fp8SplitRoleKernelMatchesTheReference) {
  KBMLA_REQUIRE_SM90();
  const RestoreEnvOnExit restore("KBMLA_Q_INLINE");
  std::vector<GpuCase> cases = split_role_cases();
  GpuCase e4m3_q{16, 4, {3000, 70}};
  e4m3_q.fp8_q = true;
  GpuCase no_rope{16, 4, {0, 2000, 130, 777}};
  no_rope.d_qk = 512;
  no_rope.num_ctas = 4;
  GpuCase no_rope_48{12, 4, {1500, 3, 300}};
  no_rope_48.d_qk = 512;
  no_rope_48.num_ctas = 5;
  GpuCase no_rope_32{8, 4, {900, 2100}};
  no_rope_32.d_qk = 512;
  cases.insert(cases.end(), {e4m3_q, no_rope, no_rope_48, no_rope_32});
  const std::vector<GpuCase> small = split_role_small_page_cases();
  cases.insert(cases.end(), small.begin(), small.end());
  for (const char* q_path : {"always", "never"}) {
    setenv("KBMLA_Q_INLINE", q_path, 1);
    for (GpuCase c : cases) {
      c.fp8 = true;
      SCOPED_TRACE(describe(c) + ", KBMLA_Q_INLINE=" + q_path);
      const GpuResult r = run_gpu_case(c);
      expect_accurate(c, r);
      const int rows = c.heads * c.q_len;
      if (rows > 64 && rows <= 96) {
        EXPECT_EQ(r.path.cta_rows, kSlicedCtaRows) << "a 2-CTA tile of 65..96 rows: two slices";
      }
    }
  }
}

// The per-block cache with the caller's e4m3 Q (its latent part, one power-of-two scale;
// the rope part in a bf16 q_pe): no quantiser, the maps over the caller's tensors, on every
// per-block kernel: the narrow one (16 rows), the split-role one (64 and 48 rows, one and
// several items a CTA), 2-CTA clusters (128 rows), pages of 16 (two loader warps).
TEST(GpuSmoke, Fp8BlockCacheWithAnE4m3QMatchesTheReference) {
  KBMLA_REQUIRE_SM90();
  std::vector<GpuCase> cases = {GpuCase{16, 1, {3000, 70, 900, 1}}, GpuCase{16, 4, {3000, 5000, 1, 700}},
                                GpuCase{12, 4, {2500, 64, 4000}}, GpuCase{16, 4, {4096, 4096}},
                                GpuCase{128, 1, {1000, 300}}, GpuCase{8, 16, {700, 2048}}};
  cases[0].num_ctas = 3;
  cases[1].num_ctas = 5;
  cases[2].num_ctas = 2;
  cases[3].num_ctas = 2;
  GpuCase pages_of_16{16, 4, {700, 1301}};
  pages_of_16.page_size = 16;
  cases.push_back(pages_of_16);
  for (GpuCase c : cases) {
    c.fp8_block = true;
    c.fp8_q = true;
    SCOPED_TRACE(describe(c));
    const GpuResult r = run_gpu_case(c);
    expect_accurate(c, r);
    EXPECT_EQ(r.path.q_operand, "latent e4m3 (the caller's, one scale); rope bf16 (the caller's q_pe)");
  }
}

// The per-block split-role kernel (kernel_fp8_block_split.cu) on split_role_cases (several
// items per CTA: the ring of P slots and the group maxima across items) and pages of 8 and
// 16 (two loader warps; P V over 64, 48 and 32 rows), with power-of-two scales and scales
// of any value, with Q quantised by its P V warpgroups (KBMLA_Q_INLINE=always: every item,
// one CTA; the 2-CTA clusters keep the quantiser) and by the quantiser (never).
TEST(GpuSmoke, Fp8BlockSplitRoleKernelMatchesTheReference) {
  KBMLA_REQUIRE_SM90();
  const RestoreEnvOnExit restore("KBMLA_Q_INLINE");
  std::vector<GpuCase> cases = split_role_cases();
  const std::vector<GpuCase> small = split_role_small_page_cases();
  cases.insert(cases.end(), small.begin(), small.end());
  for (const char* q_path : {"always", "never"}) {
    setenv("KBMLA_Q_INLINE", q_path, 1);
    for (GpuCase c : cases) {
      c.fp8_block = true;
      SCOPED_TRACE(describe(c) + ", KBMLA_Q_INLINE=" + q_path);
      expect_accurate(c, run_gpu_case(c));
      c.fp8_block_any_scales = true;
      expect_accurate(c, run_gpu_case(c));
    }
  }
}

// The per-block split-role kernel with Q quantised by its P V warpgroups (the host's
// choice where each CTA runs one item: worklist plans of as many equal requests as CTAs,
// the static policy), over 64-, 48-, 32- and 17-row tiles and pages of 16 (two loader
// warps): accurate, and bit for bit the outputs of the quantiser's Q (KBMLA_Q_INLINE=never:
// the same e4m3 bytes and row scales, the same kernel arithmetic).
TEST(GpuSmoke, Fp8BlockSplitRoleKernelQuantisesQInItsPvWarpgroups) {
  KBMLA_REQUIRE_SM90();
  const RestoreEnvOnExit restore("KBMLA_Q_INLINE");
  GpuCase rows_64{16, 4, {2000, 2000}};
  rows_64.num_ctas = 2;
  GpuCase rows_48{12, 4, {1500, 1500, 1500}};
  rows_48.num_ctas = 3;
  GpuCase rows_32{8, 4, {900, 900}};
  rows_32.num_ctas = 2;
  GpuCase rows_17{17, 1, {700, 700}};
  rows_17.num_ctas = 2;
  GpuCase fixed{16, 4, {3000, 70, 1}};
  fixed.policy = Policy::kStatic;
  fixed.static_splits = 3;
  GpuCase pages_of_16{16, 4, {1000, 1000}};
  pages_of_16.page_size = 16;
  pages_of_16.num_ctas = 2;
  for (GpuCase c : {rows_64, rows_48, rows_32, rows_17, fixed, pages_of_16}) {
    c.fp8_block = true;
    SCOPED_TRACE(describe(c));
    unsetenv("KBMLA_Q_INLINE");
    const GpuResult inline_q = run_gpu_case(c);
    EXPECT_NE(inline_q.path.q_operand.find("P V warpgroups"), std::string::npos) << inline_q.path.summary();
    expect_accurate(c, inline_q);
    setenv("KBMLA_Q_INLINE", "never", 1);
    const GpuResult quantiser_q = run_gpu_case(c);
    EXPECT_NE(quantiser_q.path.q_operand.find("quantiser"), std::string::npos) << quantiser_q.path.summary();
    EXPECT_EQ(0, std::memcmp(inline_q.out.data(), quantiser_q.out.data(), inline_q.out.size() * sizeof(ref::Bf16)));
    EXPECT_EQ(0, std::memcmp(inline_q.lse.data(), quantiser_q.lse.data(), inline_q.lse.size() * sizeof(float)));
  }
}

// A page out of range in the split-role kernels' tile (16 heads x q_len 4, pages of 32, one
// item): the error word names it, the output is zeros and the LSE -inf; per-tensor and
// per-block, each with Q quantised in the kernel and by the quantiser.
TEST(GpuSmoke, Fp8SplitRoleKernelReportsABadPage) {
  KBMLA_REQUIRE_SM90();
  const RestoreEnvOnExit restore("KBMLA_Q_INLINE");
  for (const char* q_path : {"always", "never", "per-block always", "per-block never"}) {
    SCOPED_TRACE(q_path);
    const bool per_block = std::strncmp(q_path, "per-block", 9) == 0;
    setenv("KBMLA_Q_INLINE", per_block ? q_path + 10 : q_path, 1);
    DecodeConfig config;
    config.softmax_scale = 0.1f;
    config.q_len = 4;
    config.page_size = 32;
    config.kv_dtype = per_block ? KvDtype::kFp8E4m3PerBlock : KvDtype::kFp8E4m3;
    std::vector<int32_t> seqlens_host = {60};
    DevicePlan plan = DevicePlan::create(config, seqlens_host);
    DeviceArray<ref::Bf16> q(std::vector<ref::Bf16>(64 * 576, ref::float_to_bf16(0.5f)));
    // e4m3 1.0 (per-block: with scales of 1.0 and a bf16 rope part of 1.0)
    DeviceArray<uint8_t> cache(per_block ? per_block_rows_of_ones(2 * 32) : std::vector<uint8_t>(2 * 32 * 576, 0x38));
    DeviceArray<ref::Bf16> out(64 * 512);
    out.poison();
    DeviceArray<int32_t> block_table(std::vector<int32_t>{0, -3}), seqlens(seqlens_host);
    DeviceArray<float> lse(64);
    DeviceArray<float> kv_scale(std::vector<float>{1.f});
    DeviceArray<uint8_t> ws(plan.workspace_bytes());
    init_workspace(ws.ptr, ws.count, nullptr);
    KvCache kv(cache.ptr, 2, 32, 576, config.kv_dtype);
    DecodeArgs args = make_decode_args(q.ptr, block_table.ptr, 2, seqlens.ptr, out.ptr, lse.ptr, ws.ptr, ws.count);
    if (!per_block) args.kv_scale = kv_scale.ptr;
    decode(plan, kv, args);
    expect_page_error_and_empty_output(ws, out, lse);
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
