// The float64 reference (analytic cases, masks, paging, dtypes, errors) and the split
// emulation of plans against it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kbmla/error.hpp"
#include "kbmla/planner.hpp"
#include "reference/fp8.hpp"
#include "reference/fp8_block.hpp"
#include "reference/random_problem.hpp"
#include "reference/reference.hpp"

namespace kbmla::ref {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

Problem small_problem(int batch, int q_len, int heads, int page_size = 64, int d_qk = 576, int d_v = 512) {
  Problem p;
  p.batch = batch;
  p.q_len = q_len;
  p.heads = heads;
  p.page_size = page_size;
  p.d_qk = d_qk;
  p.d_v = d_v;
  p.scale = 1.0 / std::sqrt(576.0);
  return p;
}

PlanShape plan_shape_for(const Problem& p, int ctas) {
  PlanShape s;
  s.batch = p.batch;
  s.q_len = p.q_len;
  s.heads = p.heads;
  s.causal = p.causal;
  s.cluster_size = p.heads * p.q_len > 64 ? 2 : 1;
  s.tile_rows = 64 * s.cluster_size;
  s.num_ctas = ctas;
  return s;
}

TEST(Fp8, E4m3EncodesAndDecodesTheOcpFormat) {
  EXPECT_EQ(float_to_e4m3(1.f), 0x38);
  EXPECT_EQ(float_to_e4m3(-2.f), 0xc0);
  EXPECT_EQ(float_to_e4m3(448.f), 0x7e);
  EXPECT_EQ(float_to_e4m3(1e6f), 0x7e);                  // saturates, never NaN
  EXPECT_EQ(float_to_e4m3(-1e6f), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.f, -9)), 0x01);   // smallest subnormal
  EXPECT_EQ(float_to_e4m3(std::ldexp(1.f, -6)), 0x08);   // smallest normal
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);               // halfway 1 and 1.125: to even
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);               // halfway 1.125 and 1.25: to even
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  // Every finite code decodes and re-encodes to itself.
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float f = e4m3_to_float(uint8_t(b));
    if (b == 0x80) {
      EXPECT_EQ(f, 0.f);
      continue;
    }
    EXPECT_EQ(float_to_e4m3(f), b) << "code " << b << " value " << f;
  }
}

// The 656-byte per-block fp8 token (issue 5 item 2): layout, scales, round trip.
TEST(Fp8, PerBlockTokenLayoutAndRoundTrip) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  // Groups of very different magnitudes, one all zero, one with a huge value.
  const float magnitude[kFp8BlockGroups] = {1e-3f, 1.f, 0.f, 3e4f};
  std::vector<float> latent(kFp8BlockLatent), rope(kFp8BlockRope);
  for (int d = 0; d < kFp8BlockLatent; ++d) latent[d] = magnitude[d / kFp8BlockGroupSize] * u(rng);
  latent[3 * kFp8BlockGroupSize + 5] = -6e4f;  // the group maximum, negative
  for (int j = 0; j < kFp8BlockRope; ++j) rope[j] = 10.f * u(rng);
  uint8_t token[kFp8BlockTokenBytes];
  encode_fp8_block_token(latent.data(), rope.data(), token);

  float scale[kFp8BlockGroups];
  std::memcpy(scale, token + 512, sizeof scale);  // bytes 512..527
  EXPECT_EQ(scale[2], 1.f) << "an all-zero group keeps scale 1";
  EXPECT_FLOAT_EQ(scale[3], 6e4f / 448.f);
  EXPECT_EQ(token[3 * kFp8BlockGroupSize + 5], 0xfe) << "the group maximum is -448 x scale";
  for (int j = 0; j < kFp8BlockRope; ++j) {
    uint16_t bits;
    std::memcpy(&bits, token + 528 + 2 * j, 2);
    EXPECT_EQ(bits, float_to_bf16(rope[j]).bits) << "rope " << j;
  }

  float back[kFp8BlockLatent + kFp8BlockRope];
  decode_fp8_block_token(token, back);
  for (int d = 0; d < kFp8BlockLatent; ++d) {
    const int g = d / kFp8BlockGroupSize;
    // e4m3 keeps 3 mantissa bits (relative error <= 2^-4 after rounding) down to its
    // smallest normal, 2^-6 x scale; below that the step is 2^-9 x scale.
    const float tol = std::ldexp(std::fabs(latent[d]), -4) + std::ldexp(scale[g], -10);
    ASSERT_TRUE(std::isfinite(back[d]));
    EXPECT_NEAR(back[d], latent[d], tol) << "latent " << d;
    if (g == 2) {
      EXPECT_EQ(back[d], 0.f);
    }
  }
  EXPECT_FLOAT_EQ(back[3 * kFp8BlockGroupSize + 5], -6e4f);
  for (int j = 0; j < kFp8BlockRope; ++j) EXPECT_EQ(back[kFp8BlockLatent + j], bf16_to_float(float_to_bf16(rope[j])));
}

TEST(Reference, SingleKeyGivesItsValueAndScore) {
  Problem p = small_problem(1, 1, 2, 4, 8, 4);
  auto r = make_random_problem<float>(p, {1}, 1);
  Outputs o = reference_decode(r.problem, r.inputs());
  const int page = r.block_table[0];
  const float* key = &r.cache[size_t(page) * 4 * 8];
  for (int h = 0; h < 2; ++h) {
    double dot = 0;
    for (int d = 0; d < 8; ++d) dot += double(r.q[h * 8 + d]) * key[d];
    EXPECT_NEAR(o.lse[h], dot * p.scale, 1e-14);
    for (int c = 0; c < 4; ++c) EXPECT_DOUBLE_EQ(o.out[h * 4 + c], key[c]);
  }
}

TEST(Reference, EqualScoresAverageTheValues) {
  Problem p = small_problem(1, 1, 1, 2, 4, 2);
  auto r = make_random_problem<float>(p, {3}, 2);
  std::fill(r.q.begin(), r.q.end(), 0.f);  // every score 0: uniform weights
  Outputs o = reference_decode(r.problem, r.inputs());
  for (int c = 0; c < 2; ++c) {
    double mean = 0;
    for (int k = 0; k < 3; ++k) {
      const int page = r.block_table[k / 2];
      mean += r.cache[(size_t(page) * 2 + k % 2) * 4 + c] / 3.0;
    }
    EXPECT_NEAR(o.out[c], mean, 1e-15);
  }
  EXPECT_NEAR(o.lse[0], std::log(3.0), 1e-15);
}

TEST(Reference, RowsWithNoVisibleKeyAreZeroAndMinusInfinity) {
  Problem p = small_problem(3, 4, 3, 16, 32, 16);
  auto r = make_random_problem<float>(p, {0, 2, 40}, 3);
  Outputs o = reference_decode(r.problem, r.inputs());
  for (int b = 0; b < 3; ++b) {
    for (int i = 0; i < 4; ++i) {
      const int visible = b == 0 ? 0 : b == 1 ? std::max(0, 2 - 4 + i + 1) : 40 - 4 + i + 1;
      for (int h = 0; h < 3; ++h) {
        const size_t row = (size_t(b) * 4 + i) * 3 + h;
        if (visible == 0) {
          EXPECT_EQ(o.lse[row], -kInf);
          for (int c = 0; c < 16; ++c) EXPECT_EQ(o.out[row * 16 + c], 0.0);
        } else {
          EXPECT_TRUE(std::isfinite(o.lse[row]));
        }
      }
    }
  }
}

TEST(Reference, CausalTokenMatchesADecodeOfTheShorterPrefix) {
  Problem p = small_problem(1, 4, 2, 8, 16, 8);
  auto r = make_random_problem<float>(p, {37}, 4);
  Outputs full = reference_decode(r.problem, r.inputs());
  for (int i = 0; i < 4; ++i) {
    std::vector<double> o(2 * 8), lse(2);
    attend(r.problem, r.inputs(), 0, i, 0, 2, 0, 37 - 4 + i + 1, o.data(), lse.data());
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(lse[h], full.lse[i * 2 + h]);
      for (int c = 0; c < 8; ++c) EXPECT_EQ(o[h * 8 + c], full.out[(i * 2 + h) * 8 + c]);
    }
  }
  // Not causal: every token sees all 37 keys, so tokens differ only through q.
  Problem nc = r.problem;
  nc.causal = false;
  EXPECT_EQ(visible_keys(nc, 37, 0), 37);
  EXPECT_EQ(visible_keys(r.problem, 37, 0), 34);
}

TEST(Reference, KeyChunksOfALongRequestMergeToTheUnchunkedResult) {
  // 70,000 keys: three chunks of at most 32,768 keys merged by LSE, against one attend
  // over all keys (small d_qk / d_v keep it fast).
  Problem p = small_problem(1, 2, 2, 64, 16, 8);
  auto r = make_random_problem<float>(p, {70000}, 11, 0);
  Outputs got = reference_decode(r.problem, r.inputs());
  for (int i = 0; i < 2; ++i) {
    std::vector<double> o(2 * 8), lse(2);
    attend(r.problem, r.inputs(), 0, i, 0, 2, 0, visible_keys(r.problem, 70000, i), o.data(), lse.data());
    for (int h = 0; h < 2; ++h) {
      EXPECT_NEAR(lse[h], got.lse[i * 2 + h], 1e-12);
      for (int c = 0; c < 8; ++c) EXPECT_NEAR(o[h * 8 + c], got.out[(i * 2 + h) * 8 + c], 1e-13);
    }
  }
}

TEST(Reference, PageSizeDoesNotChangeTheResult) {
  const std::vector<int32_t> seqlens = {1, 100, 257};
  Problem base = small_problem(3, 2, 4, 1, 24, 16);
  auto r1 = make_random_problem<float>(base, seqlens, 5, 0);
  Outputs expect = reference_decode(r1.problem, r1.inputs());
  for (int page : {2, 16, 64, 256}) {
    Problem p = small_problem(3, 2, 4, page, 24, 16);
    auto rp = make_random_problem<float>(p, seqlens, 6);
    rp.q = r1.q;
    // Copy r1's logical rows into rp's pages.
    for (int b = 0; b < 3; ++b) {
      for (int k = 0; k < seqlens[b]; ++k) {
        const float* src = &r1.cache[size_t(r1.block_table[size_t(b) * r1.problem.max_pages + k]) * 24];
        float* dst = &rp.cache[(size_t(rp.block_table[size_t(b) * rp.problem.max_pages + k / page]) * page +
                                k % page) * 24];
        std::copy_n(src, 24, dst);
      }
    }
    Outputs got = reference_decode(rp.problem, rp.inputs());
    EXPECT_EQ(got.out, expect.out) << "page " << page;
    EXPECT_EQ(got.lse, expect.lse) << "page " << page;
  }
}

TEST(Reference, Bf16InputsEqualTheirFloatValues) {
  Problem p = small_problem(2, 2, 3, 16, 64, 32);
  auto rb = make_random_problem<Bf16>(p, {20, 33}, 7);
  RandomProblem<float> rf;
  rf.problem = rb.problem;
  rf.block_table = rb.block_table;
  rf.seqlens = rb.seqlens;
  for (Bf16 v : rb.q) rf.q.push_back(bf16_to_float(v));
  for (Bf16 v : rb.cache) rf.cache.push_back(bf16_to_float(v));
  Outputs a = reference_decode(rb.problem, rb.inputs()), b = reference_decode(rf.problem, rf.inputs());
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.lse, b.lse);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.0f)), 1.0f);
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.00390625f)), 1.0f);     // ties to even
  EXPECT_EQ(bf16_to_float(float_to_bf16(1.01171875f)), 1.015625f);  // ties to even (up)
}

TEST(Reference, RejectsInputsThatWouldReadOutOfBounds) {
  Problem p = small_problem(2, 1, 2, 16, 32, 16);
  auto r = make_random_problem<float>(p, {10, 20}, 8);
  auto expect_error = [&](RandomProblem<float> bad, const std::string& needle) {
    try {
      reference_decode(bad.problem, bad.inputs());
      ADD_FAILURE() << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  auto bad = r;
  bad.seqlens[1] = bad.problem.max_pages * 16 + 1;
  expect_error(bad, "seqlens[1]");
  bad = r;
  bad.block_table[0] = int32_t(bad.problem.num_pages);
  expect_error(bad, "block_table[0][0]");
  bad = r;
  bad.seqlens[0] = -1;
  expect_error(bad, "seqlens[0] = -1");
  bad = r;
  bad.q.pop_back();
  expect_error(bad, "q has");
}

TEST(Combine, MinusInfinityPartialsWeighZeroNeverNaN) {
  std::vector<double> o1 = {1, 2}, o2 = {3, 4}, out(2);
  std::vector<const double*> os = {o1.data(), o2.data()};
  double lse;
  std::vector<double> lses = {-kInf, 0.5};
  combine_row(lses, os, 2, out.data(), &lse);
  EXPECT_EQ(lse, 0.5);
  EXPECT_EQ(out, o2);
  lses = {-kInf, -kInf};
  combine_row(lses, os, 2, out.data(), &lse);
  EXPECT_EQ(lse, -kInf);
  EXPECT_EQ(out, (std::vector<double>{0, 0}));
  lses = {std::log(1.0), std::log(3.0)};  // weights 1/4, 3/4
  combine_row(lses, os, 2, out.data(), &lse);
  EXPECT_NEAR(lse, std::log(4.0), 1e-15);
  EXPECT_NEAR(out[0], 0.25 * 1 + 0.75 * 3, 1e-15);
}

struct EmulationCase {
  int heads, q_len, page_size, ctas;
  std::vector<int32_t> seqlens;
};

TEST(SplitEmulation, MatchesTheUnsplitReferenceTo1em12) {
  const std::vector<EmulationCase> cases = {
      {16, 4, 64, 132, {0, 1, 3, 63, 64, 65, 700, 2049}},
      {16, 1, 64, 132, {4096}},                   // one request cut into many splits
      {16, 1, 16, 5, {5, 900, 64, 1000, 0}},      // small CTA budget, page 16
      {24, 4, 1, 17, {1, 2, 129, 300}},           // page 1, 96 rows: cluster of 2
      {96, 2, 64, 40, {65, 3, 1500}},             // 192 rows: two 128-row tiles
      {128, 9, 32, 64, {1, 8, 9, 10, 200}},       // causal tail inside splits, 9 tiles
      {1, 9, 64, 132, {2, 3000}},
  };
  for (const auto& c : cases) {
    for (bool causal : {true, false}) {
      Problem p = small_problem(int(c.seqlens.size()), c.q_len, c.heads, c.page_size);
      p.causal = causal || c.q_len == 1;
      auto r = make_random_problem<Bf16>(p, c.seqlens, 9 + c.heads);
      HostPlan plan = make_host_plan(plan_shape_for(r.problem, c.ctas), c.seqlens);
      Outputs expect = reference_decode(r.problem, r.inputs());
      Outputs got = emulate_split_decode(r.problem, r.inputs(), plan);
      Comparison cmp = compare(r.problem, expect, got.out, got.lse);
      SCOPED_TRACE(::testing::Message() << "heads " << c.heads << " q_len " << c.q_len << " ctas " << c.ctas
                                        << " causal " << p.causal);
      EXPECT_FALSE(cmp.any_nan);
      EXPECT_FALSE(cmp.infinite_lse_mismatch);
      EXPECT_LE(cmp.rel_frobenius, 1e-12);
      EXPECT_LE(cmp.worst_row_rel, 1e-12);
      EXPECT_LE(cmp.lse_max_abs, 1e-12);
    }
  }
}

TEST(SplitEmulation, ADroppedWorkItemLeavesNaNThatTheComparisonCatches) {
  Problem p = small_problem(3, 1, 16);
  auto r = make_random_problem<Bf16>(p, {100, 5000, 64}, 10);
  HostPlan plan = make_host_plan(plan_shape_for(r.problem, 8), r.seqlens);
  Outputs expect = reference_decode(r.problem, r.inputs());
  // Drop the last item of slot 0's column: its rows are never written.
  int last = -1;
  for (size_t i = 0; i < plan.work_list.size(); i += plan.counts.num_active_clusters) {
    if (plan.work_list[i] < 0) break;
    last = int(i);
  }
  ASSERT_GE(last, 0);
  plan.work_list[last] = kNoWork;
  Outputs got = emulate_split_decode(r.problem, r.inputs(), plan);
  Comparison cmp = compare(r.problem, expect, got.out, got.lse);
  EXPECT_TRUE(cmp.any_nan);
  EXPECT_FALSE(cmp.rel_frobenius <= 1e-2);
}

}  // namespace
}  // namespace kbmla::ref
