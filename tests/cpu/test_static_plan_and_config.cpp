// Host-side pieces of the decode path that need no GPU: the static policies' split table
// and the configuration checks of the public API.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kbmla/decode.hpp"
#include "kbmla/error.hpp"
#include "kbmla/static_baseline.hpp"

namespace kbmla {
namespace {

TEST(StaticPlan, EveryRequestWithWorkGetsSSplitsCoveringItsBlocks) {
  const std::vector<int32_t> seqlens = {0, 1, 64, 65, 700, 4096, 3};
  PlanShape s;
  s.batch = int(seqlens.size());
  s.q_len = 4;
  s.heads = 16;
  for (int S : {1, 2, 3, 7, 64}) {
    HostPlan plan = make_static_plan(s, seqlens, S);
    EXPECT_TRUE(plan.work_list.empty());
    int slots = 0;
    for (int b = 0; b < s.batch; ++b) {
      const int nb = (seqlens[b] + 63) / 64;
      if (nb == 0) {
        EXPECT_EQ(plan.num_splits[b], 0) << b;
        continue;
      }
      ASSERT_EQ(plan.num_splits[b], S) << b;
      EXPECT_EQ(plan.first_slot[b], S > 1 ? slots : -1);
      if (S > 1) slots += S;
      const int off = plan.bounds_offset[b];
      EXPECT_EQ(plan.bounds[off], 0);
      EXPECT_EQ(plan.bounds[off + S], nb);
      for (int k = 0; k < S; ++k) EXPECT_LE(plan.bounds[off + k], plan.bounds[off + k + 1]);
    }
    EXPECT_EQ(plan.counts.num_slots, slots);
    EXPECT_EQ(plan.counts.num_zero_fill, 1);  // request 0: one 64-row tile, no key
  }
  EXPECT_THROW(make_static_plan(s, seqlens, 0), Error);
  EXPECT_THROW(make_static_plan(s, seqlens, 257), Error);
}

TEST(DecodeConfig, RejectsUnsupportedValuesNamingThem) {
  auto expect_error = [](DecodeConfig c, const std::string& needle) {
    try {
      validate_config(c);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  DecodeConfig ok;
  ok.softmax_scale = 0.07f;
  EXPECT_NO_THROW(validate_config(ok));
  auto with = [&](auto f) { DecodeConfig c = ok; f(c); return c; };
  expect_error(with([](DecodeConfig& c) { c.heads = 0; }), "heads (0) must be in 1..128");
  expect_error(with([](DecodeConfig& c) { c.heads = 129; }), "heads (129)");
  expect_error(with([](DecodeConfig& c) { c.q_len = 17; }), "q_len (17) must be in 1..16");
  expect_error(with([](DecodeConfig& c) { c.d_qk = 448; }), "d_qk (448) is not supported; supported: 576, 512");
  expect_error(with([](DecodeConfig& c) { c.d_v = 256; }), "d_v (256)");
  expect_error(with([](DecodeConfig& c) { c.page_size = 48; }),
               "page_size (48) is not supported; supported: powers of two 1..256");
  expect_error(with([](DecodeConfig& c) { c.page_size = 512; }),
               "page_size (512) is not supported; supported: powers of two 1..256");
  expect_error(with([](DecodeConfig& c) { c.page_size = 0; }),
               "page_size (0) is not supported; supported: powers of two 1..256");
  expect_error(with([](DecodeConfig& c) { c.kv_dtype = static_cast<KvDtype>(7); }),
               "kv_dtype (7) is not one of kBFloat16, kFp8E4m3, kFp8E4m3PerBlock");
  expect_error(with([](DecodeConfig& c) {
                 c.kv_dtype = KvDtype::kFp8E4m3PerBlock;
                 c.d_qk = 512;
               }),
               "kv_dtype kFp8E4m3PerBlock has d_qk 576 (512 latent + 64 rope values per 656-byte token), got d_qk 512");
  expect_error(with([](DecodeConfig& c) { c.softmax_scale = 0.f; }), "softmax_scale (0)");
  expect_error(with([](DecodeConfig& c) { c.softmax_scale = std::numeric_limits<float>::quiet_NaN(); }),
               "softmax_scale");
}

TEST(DecodeConfig, KvDtypeNamesAndTokenBytes) {
  EXPECT_STREQ(kv_dtype_name(KvDtype::kBFloat16), "bf16");
  EXPECT_STREQ(kv_dtype_name(KvDtype::kFp8E4m3), "fp8_e4m3");
  EXPECT_STREQ(kv_dtype_name(KvDtype::kFp8E4m3PerBlock), "fp8_e4m3_block");
  EXPECT_EQ(kv_token_bytes(KvDtype::kBFloat16, 576), 1152);
  EXPECT_EQ(kv_token_bytes(KvDtype::kFp8E4m3, 512), 512);
  EXPECT_EQ(kv_token_bytes(KvDtype::kFp8E4m3PerBlock, 576), 656);
  // The cache's own checks run before any driver call.
  alignas(16) static char buf[656];
  try {
    KvCache kv(buf, 1, 64, 512, KvDtype::kFp8E4m3PerBlock);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the per-block fp8 cache has d_qk 576"), std::string::npos) << e.what();
  }
}

TEST(DecodeConfig, PolicyNames) {
  EXPECT_STREQ(policy_name(Policy::kWorkList), "worklist");
  EXPECT_STREQ(policy_name(Policy::kStatic), "static");
  EXPECT_STREQ(policy_name(Policy::kStaticPersistent), "static_persistent");
}

}  // namespace
}  // namespace kbmla
