// GPU full sweep: every policy x heads {1, 8, 12, 16, 24, 64, 96, 128} x q_len {1, 2, 4, 9}
// (and q_len 16 up to 2048 rows, d_qk 512, page sizes 1..256, fp8 caches)
// on ragged batches with seqlens 0, 1, 63, 64, 65, 4096 (shorter where heads x q_len is
// large, to keep the float64 oracle fast), plus batch 1 at 131,072, batch 64 ragged mixes,
// split boundaries inside the last q_len keys, and a non-causal case.
#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

std::vector<GpuCase> sweep_cases() {
  std::vector<GpuCase> cases;
  const int heads_list[] = {1, 8, 12, 16, 24, 64, 96, 128};
  const int q_lens[] = {1, 2, 4, 9};
  const std::vector<std::vector<int32_t>> patterns = {
      {0, 1, 4096}, {63, 64, 65}, {65, 0, 1000}, {1, 4096, 64}, {64, 2049, 0}, {4096, 63, 1}};
  uint64_t seed = 100;
  int k = 0;
  for (Policy policy : {Policy::kWorkList, Policy::kStatic, Policy::kStaticPersistent}) {
    for (int heads : heads_list) {
      for (int q_len : q_lens) {
        std::vector<int32_t> s = patterns[k++ % patterns.size()];
        if (heads * q_len > 256) {
          for (auto& x : s) x = std::min(x, 1100);
        }
        cases.push_back({heads, q_len, s, policy, 0, 0, true, seed++});
      }
    }
    cases.push_back({16, 1, {131072}, policy, 0, 0, true, seed++});
    cases.push_back({8, 4, {131072, 7}, policy, 0, 0, true, seed++});
    std::vector<int32_t> ragged(64);
    for (int b = 0; b < 64; ++b) ragged[b] = (b * 7919) % 6000 + (b % 9 == 0 ? 0 : 1) * 0;
    ragged[5] = 0;
    ragged[17] = 1;
    cases.push_back({16, 1, ragged, policy, 0, 0, true, seed++});
    std::vector<int32_t> short_ragged = ragged;
    for (auto& x : short_ragged) x = x % 700;
    cases.push_back({24, 4, short_ragged, policy, 0, 0, true, seed++});
    cases.push_back({128, 1, short_ragged, policy, 0, 0, true, seed++});
  }
  // Split boundaries inside the last q_len keys: static S = 3 over 133 tokens (boundary at
  // 128 of keys 124..132), and the work list on 40 CTAs over 64 x 40 + 3 tokens.
  cases.push_back({16, 9, {133}, Policy::kStatic, 0, 3, true, seed++});
  cases.push_back({16, 9, {64 * 40 + 3}, Policy::kWorkList, 40, 0, true, seed++});
  cases.push_back({96, 9, {64 * 20 + 2, 5}, Policy::kWorkList, 24, 0, true, seed++});
  // 2-CTA clusters (more than 64 rows): the second CTA with no rows (33 x 4 = 132 rows:
  // the last q tile has 4), with one row (65 heads), CTAs of one cluster seeing different
  // keys (16 x 8, causal: rows 0..63 are queries 0..3, rows 64..127 queries 4..7), an odd
  // CTA budget (7 -> 3 clusters), and each policy.
  cases.push_back({33, 4, {700, 0, 130}, Policy::kWorkList, 0, 0, true, seed++});
  cases.push_back({33, 4, {700, 0, 130}, Policy::kStatic, 0, 2, true, seed++});
  cases.push_back({65, 1, {1000, 64, 3}, Policy::kStaticPersistent, 0, 3, true, seed++});
  cases.push_back({16, 8, {129, 4096, 60}, Policy::kWorkList, 7, 0, true, seed++});
  cases.push_back({16, 8, {2000}, Policy::kStatic, 0, 3, true, seed++});
  cases.push_back({96, 2, {64 * 9 + 1, 1}, Policy::kWorkList, 0, 0, false, seed++});
  // q_len 16 (issue 5): up to 2048 rows, 16 q tiles of 128 rows per request.
  cases.push_back({128, 16, {300, 0, 70}, Policy::kWorkList, 0, 0, true, seed++});
  cases.push_back({12, 16, {5000, 16, 15, 1}, Policy::kWorkList, 0, 0, true, seed++});
  cases.push_back({1, 16, {129, 2}, Policy::kStatic, 0, 2, true, seed++});
  cases.push_back({64, 16, {600}, Policy::kStaticPersistent, 0, 3, true, seed++});
  // d_qk 512 (no rope part; issue 5): every policy, a 2-CTA cluster shape, non-causal.
  auto no_rope = [&](GpuCase c) {
    c.d_qk = 512;
    cases.push_back(c);
  };
  no_rope({16, 1, {0, 1, 4096, 65}, Policy::kWorkList, 0, 0, true, seed++});
  no_rope({16, 4, {64 * 40 + 3}, Policy::kWorkList, 40, 0, true, seed++});
  no_rope({128, 2, {700, 63}, Policy::kWorkList, 0, 0, true, seed++});
  no_rope({24, 4, {1000, 5}, Policy::kStatic, 0, 3, true, seed++});
  no_rope({12, 9, {2000, 130}, Policy::kStaticPersistent, 0, 2, false, seed++});
  // Page sizes 1..256 (issue 5): pages smaller than a 64-token block (several TMA boxes per
  // stage, the last page of a request partly past its seqlen, the block table's slots past
  // it poisoned) and larger (64-token parts of a page), every policy, a 2-CTA cluster
  // (multicast of small pages), d_qk 512, and seqlens ending inside and at page edges.
  auto paged = [&](int page_size, GpuCase c) {
    c.page_size = page_size;
    cases.push_back(c);
  };
  for (int page_size : {1, 2, 4, 8, 16, 32, 128, 256}) {
    paged(page_size, {16, 1, {0, 1, 63, 64, 65, page_size + 1, 1000}, Policy::kWorkList, 0, 0, true, seed++});
  }
  paged(1, {16, 4, {64 * 40 + 3, 7}, Policy::kWorkList, 40, 0, true, seed++});
  paged(16, {16, 4, {5000, 3, 900}, Policy::kWorkList, 7, 0, true, seed++});
  paged(32, {128, 2, {700, 63, 1}, Policy::kWorkList, 0, 0, true, seed++});
  paged(8, {96, 9, {64 * 9 + 5, 2}, Policy::kStatic, 0, 3, true, seed++});
  paged(128, {33, 4, {700, 0, 130}, Policy::kStaticPersistent, 0, 3, true, seed++});
  paged(256, {16, 9, {64 * 40 + 3}, Policy::kWorkList, 40, 0, true, seed++});
  paged(16, {24, 4, {1000, 5, 16, 17}, Policy::kStatic, 0, 3, false, seed++});
  {
    GpuCase c{12, 9, {2000, 130}, Policy::kWorkList, 0, 0, true, seed++};
    c.d_qk = 512;
    paged(2, c);
  }
  // The row gather's loader warps taking blocks in turn (two for bf16) inside 2-CTA
  // clusters, with items of odd block counts so that the turn crosses items.
  paged(4, {128, 1, {64 * 7 + 1, 65, 1, 700}, Policy::kWorkList, 0, 0, true, seed++});
  // fp8 e4m3 cache (issue 5): the kernel with fp8 wgmma (V^T from ldmatrix.trans), every policy,
  // 2-CTA clusters, q_len up to 16, d_qk 512, page sizes, splits and seqlen tails.
  auto fp8 = [&](GpuCase c) {
    c.fp8 = true;
    cases.push_back(c);
  };
  fp8({16, 1, {0, 1, 63, 64, 65, 4096}, Policy::kWorkList, 0, 0, true, seed++});
  fp8({16, 4, {5000, 3, 900}, Policy::kWorkList, 7, 0, true, seed++});
  fp8({16, 4, {64 * 40 + 3, 70}, Policy::kStatic, 0, 3, true, seed++});
  fp8({64, 1, {1000, 64, 3}, Policy::kStaticPersistent, 0, 3, true, seed++});
  fp8({128, 2, {700, 63, 1}, Policy::kWorkList, 0, 0, true, seed++});
  fp8({12, 9, {2000, 130}, Policy::kWorkList, 0, 0, false, seed++});
  fp8({24, 16, {300, 17}, Policy::kWorkList, 0, 0, true, seed++});
  // 2-CTA tiles of 65..96 rows in two 48-row slices (kernel.hpp, cluster_cta_rows) under
  // the static policies: 96 rows with splits, 80 (48 + 32) persistent.
  fp8({24, 4, {3000, 70, 1}, Policy::kStatic, 0, 3, true, seed++});
  fp8({20, 4, {2000, 65}, Policy::kStaticPersistent, 0, 2, true, seed++});
  fp8({1, 1, {131072}, Policy::kWorkList, 0, 0, true, seed++});
  {
    GpuCase c{16, 2, {0, 1, 4096, 65}, Policy::kWorkList, 0, 0, true, seed++};
    c.d_qk = 512;
    fp8(c);
  }
  for (int page_size : {1, 16, 256}) {
    GpuCase c{16, 4, {1, 63, 65, 700}, Policy::kWorkList, 0, 0, true, seed++};
    c.page_size = page_size;
    fp8(c);
  }
  // Tiles of at most 16 rows (S^T = K Q^T, rows as N): causal rows with different visible
  // keys, padding rows (15 and 12 of 16), splits, a static policy, d_qk 512, one-token pages.
  fp8({4, 4, {5000, 3, 900, 64}, Policy::kWorkList, 0, 0, true, seed++});
  fp8({3, 5, {130, 7, 4097}, Policy::kWorkList, 0, 0, true, seed++});
  fp8({16, 1, {9000, 3, 900}, Policy::kWorkList, 7, 0, true, seed++});
  fp8({6, 2, {700, 70, 64 * 20}, Policy::kStatic, 0, 3, true, seed++});
  {
    GpuCase c{4, 3, {1, 65, 4096}, Policy::kWorkList, 0, 0, true, seed++};
    c.d_qk = 512;
    fp8(c);
  }
  {
    GpuCase c{2, 8, {1, 63, 65, 700}, Policy::kWorkList, 0, 0, true, seed++};
    c.page_size = 1;
    fp8(c);
  }
  {
    // Three gather warps in turn, 2-CTA clusters (96 rows: 64 + 32), items of odd block counts.
    GpuCase c{96, 1, {64 * 7 + 1, 65, 1, 700}, Policy::kWorkList, 0, 0, true, seed++};
    c.page_size = 1;
    fp8(c);
  }
  // 17..64-row tiles with padding rows: Kimi's 12 heads x q_len 4 (48 rows), 25 rows under
  // a 5-CTA budget, 40 rows static non-causal.
  fp8({12, 4, {3000, 64, 5}, Policy::kWorkList, 0, 0, true, seed++});
  fp8({5, 5, {130, 4097, 7}, Policy::kWorkList, 5, 0, true, seed++});
  fp8({20, 2, {700, 70, 64 * 20}, Policy::kStatic, 0, 3, false, seed++});
  // fp8 cache with per-block scales (issue 5 item 2): policies, clusters, q_len up to 16,
  // Kimi K3 heads, page sizes 1..256 (one-token pages gathered).
  auto fp8_block = [&](GpuCase c) {
    c.fp8_block = true;
    cases.push_back(c);
  };
  fp8_block({16, 1, {0, 1, 63, 64, 65, 4096}, Policy::kWorkList, 0, 0, true, seed++});
  fp8_block({16, 4, {5000, 3, 900}, Policy::kWorkList, 7, 0, true, seed++});
  fp8_block({16, 4, {64 * 40 + 3, 70}, Policy::kStatic, 0, 3, true, seed++});
  fp8_block({64, 1, {1000, 64, 3}, Policy::kStaticPersistent, 0, 3, true, seed++});
  fp8_block({128, 2, {700, 63, 1}, Policy::kWorkList, 0, 0, true, seed++});
  fp8_block({12, 9, {2000, 130}, Policy::kWorkList, 0, 0, false, seed++});
  fp8_block({24, 16, {300, 17}, Policy::kWorkList, 0, 0, true, seed++});
  fp8_block({96, 4, {1500, 90}, Policy::kWorkList, 0, 0, true, seed++});
  // The split-role kernels in 2-CTA clusters under the static schedulers (v39), both formats.
  fp8_block({96, 1, {700, 63, 1, 2000}, Policy::kStatic, 0, 3, true, seed++});
  fp8_block({128, 2, {900, 64}, Policy::kStaticPersistent, 0, 2, true, seed++});
  fp8({96, 1, {700, 63, 1, 2000}, Policy::kStatic, 0, 3, true, seed++});
  fp8({80, 2, {900, 64, 5}, Policy::kStaticPersistent, 0, 2, false, seed++});
  for (int page_size : {1, 2, 16, 32, 128, 256}) {
    GpuCase c{16, 4, {1, 63, 65, 700}, Policy::kWorkList, 0, 0, true, seed++};
    c.page_size = page_size;
    fp8_block(c);
  }
  // Tiles of at most 16 rows (S^T with the group fold): causal rows, padding rows, splits,
  // a static policy, one-token pages, scales of any value.
  fp8_block({4, 4, {5000, 3, 900, 64}, Policy::kWorkList, 0, 0, true, seed++});
  fp8_block({3, 5, {130, 7, 4097}, Policy::kWorkList, 0, 0, true, seed++});
  fp8_block({16, 1, {9000, 3, 900}, Policy::kWorkList, 7, 0, true, seed++});
  fp8_block({6, 2, {700, 70, 64 * 20}, Policy::kStatic, 0, 3, true, seed++});
  {
    GpuCase c{2, 8, {1, 63, 65, 700}, Policy::kWorkList, 0, 0, true, seed++};
    c.page_size = 1;
    fp8_block(c);
  }
  {
    // Two gather warps in turn (the third producer warp is the scale helper), 2-CTA clusters.
    GpuCase c{128, 1, {64 * 7 + 1, 65, 1, 700}, Policy::kWorkList, 0, 0, true, seed++};
    c.page_size = 2;
    fp8_block(c);
  }
  {
    GpuCase c{12, 1, {3000, 64, 5}, Policy::kWorkList, 0, 0, true, seed++};
    c.fp8_block_any_scales = true;
    fp8_block(c);
  }
  // 17..64-row tiles with padding rows (as the per-tensor cases above).
  fp8_block({12, 4, {3000, 64, 5}, Policy::kWorkList, 0, 0, true, seed++});
  fp8_block({5, 5, {130, 4097, 7}, Policy::kWorkList, 5, 0, true, seed++});
  fp8_block({20, 2, {700, 70, 64 * 20}, Policy::kStatic, 0, 3, false, seed++});
  // Small CTA budgets and a non-causal multi-token case.
  cases.push_back({16, 4, {5000, 3, 900}, Policy::kWorkList, 7, 0, true, seed++});
  cases.push_back({16, 4, {5000, 3, 900}, Policy::kWorkList, 1, 0, true, seed++});
  cases.push_back({12, 4, {2, 300, 77}, Policy::kWorkList, 0, 0, false, seed++});
  // Per-tensor fp8 tiles of at most 16 rows over pages of 128 and 256 tokens (loaded in
  // 64-token parts, each part's index inside its page; 32-token parts before v62);
  // seqlens ending inside a part and at part edges, splits that start mid-page (a CTA
  // budget), and a static policy. (Appended: the cases above keep their names and seeds.)
  {
    GpuCase c{16, 1, {1, 31, 33, 97, 700, 64 * 9 + 40}, Policy::kWorkList, 7, 0, true, seed++};
    c.page_size = 128;
    fp8(c);
  }
  {
    GpuCase c{5, 3, {32, 255, 257, 64 * 20 + 1}, Policy::kStatic, 0, 3, true, seed++};
    c.page_size = 256;
    fp8(c);
  }
  return cases;
}

class GpuSweep : public ::testing::TestWithParam<GpuCase> {};

TEST_P(GpuSweep, MatchesFloat64Reference) {
  KBMLA_REQUIRE_SM90();
  expect_accurate(GetParam(), run_gpu_case(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Cases, GpuSweep, ::testing::ValuesIn(sweep_cases()),
                         [](const ::testing::TestParamInfo<GpuCase>& info) {
                           const GpuCase& c = info.param;
                           return std::string(policy_name(c.policy)) + "_h" + std::to_string(c.heads) + "_q" +
                                  std::to_string(c.q_len) + "_b" + std::to_string(c.seqlens.size()) + "_" +
                                  std::to_string(info.index);
                         });

}  // namespace
}  // namespace kbmla::test
