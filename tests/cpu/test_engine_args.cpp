// Engine-shaped arguments and decode context parallelism, host side: the causal mask with
// global positions against a brute-force count, the DCP configuration checks, and the
// strides / Q-layout checks that run before anything touches the GPU.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "kbmla/dcp.hpp"
#include "kbmla/decode.hpp"
#include "kbmla/error.hpp"
#include "src/common/rows.hpp"
#include "src/runtime/tensor_maps.hpp"

namespace kbmla {
namespace {

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Local keys of request b seen by each row, counted from global positions one by one.
int brute_force_visible(bool interleaved, int world, int rank, int first, int G, int L, int q_len, int s) {
  int n = 0;
  for (int j = 0; j < L; ++j) {
    const int64_t pos = interleaved ? int64_t{j} * world + rank : int64_t{first} + j;
    if (pos <= int64_t{G} - q_len + s) ++n;
  }
  return n;
}

TEST(KeyVisibility, GlobalPositionsMatchABruteForceCount) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const int world = 1 + int(rng() % 5);
    const int rank = int(rng() % world);
    const bool interleaved = rng() % 2;
    const int q_len = 1 + int(rng() % 16);
    const int heads = 1 + int(rng() % 24);
    const int G = int(rng() % 300);
    int first = 0, L = 0;
    if (interleaved) {
      L = G > rank ? (G - rank + world - 1) / world : 0;
    } else {
      first = G > 0 ? int(rng() % (G + 1)) : 0;
      L = int(rng() % (G - first + 1));
    }
    const int32_t global_seqlens[1] = {G};
    const int32_t kv_offsets[1] = {first};
    KeyVisibility v{};
    v.causal = true;
    v.q_len = q_len;
    v.heads = FastDivmod(heads);
    v.world = world;
    v.rank = rank;
    v.world_div = FastDivmod(world);
    v.interleaved = interleaved;
    v.global_seqlens = global_seqlens;
    v.kv_offsets = kv_offsets;
    ASSERT_TRUE(world == 1 || v.consistent(0, L)) << trial;
    for (int row = 0; row < q_len * heads; ++row) {
      const int expect = world == 1 ? brute_force_visible(false, 1, 0, 0, L, L, q_len, row / heads)
                                    : brute_force_visible(interleaved, world, rank, first, G, L, q_len, row / heads);
      ASSERT_EQ(v.visible(0, L, row), expect)
          << "trial " << trial << " world " << world << " rank " << rank << (interleaved ? " interleaved" : "")
          << " G " << G << " first " << first << " L " << L << " row " << row;
    }
    if (world > 1) {
      // A local length the global one cannot have is caught.
      EXPECT_FALSE(v.consistent(0, interleaved ? L + 1 : G - first + 1)) << trial;
    }
  }
}

TEST(DecodeConfigChecks, ContextParallelFieldsAreNamed) {
  DecodeConfig c;
  c.softmax_scale = 0.1f;
  c.dcp_world = 0;
  EXPECT_NE(error_of([&] { validate_config(c); }).find("dcp_world (0) must be in 1..1024"), std::string::npos);
  c.dcp_world = 2;
  c.dcp_rank = 2;
  EXPECT_NE(error_of([&] { validate_config(c); }).find("dcp_rank (2) must be in 0..1"), std::string::npos);
  c.dcp_rank = 1;
  EXPECT_EQ(error_of([&] { validate_config(c); }), "(no error)");
  // A DCP plan has no causal tile skipping: the planner cannot see global positions.
  EXPECT_FALSE(decode_plan_shape(c, 3, PlanOptions{.policy = Policy::kWorkList, .num_ctas = 8, .static_splits = 0, .cost = std::nullopt}).causal);
  c.dcp_world = 1;
  c.dcp_rank = 0;
  EXPECT_TRUE(decode_plan_shape(c, 3, PlanOptions{.policy = Policy::kWorkList, .num_ctas = 8, .static_splits = 0, .cost = std::nullopt}).causal);
}

TEST(DecodeArgsChecks, DcpInputsMustMatchTheConfig) {
  DecodeConfig c;
  c.softmax_scale = 0.1f;
  c.dcp_world = 2;
  DecodeArgs a;
  EXPECT_NE(error_of([&] { detail::key_visibility(c, a); }).find("dcp_global_seqlens is null"), std::string::npos);
  const int32_t dummy[1] = {0};
  a.dcp_global_seqlens = dummy;
  EXPECT_NE(error_of([&] { detail::key_visibility(c, a); }).find("needs dcp_kv_offsets"), std::string::npos);
  c.dcp_layout = DcpLayout::kInterleaved;
  EXPECT_EQ(error_of([&] { detail::key_visibility(c, a); }), "(no error)");
  c.dcp_world = 1;
  EXPECT_NE(error_of([&] { detail::key_visibility(c, a); }).find("dcp_world is 1"), std::string::npos);
}

TEST(DecodeArgsChecks, OutputStridesAndBase) {
  DecodeConfig c;
  c.heads = 16;
  c.q_len = 4;
  c.softmax_scale = 0.1f;
  alignas(16) static char buf[64];
  DecodeArgs a;
  a.out = buf;
  a.lse = reinterpret_cast<float*>(buf);
  OutputView v = detail::output_view(c, 3, a);
  EXPECT_EQ(v.out_strides.head, 512);
  EXPECT_EQ(v.out_strides.token, 16 * 512);
  EXPECT_EQ(v.out_strides.batch, 4 * 16 * 512);
  EXPECT_EQ(v.lse_strides.batch, 64);
  EXPECT_FLOAT_EQ(v.lse_scale, 0.69314718f);
  // vLLM's lse [heads, tokens]: token stride 1, head stride = tokens.
  a.lse_strides = {4, 1, 12};
  a.lse_base = LseBase::k2;
  v = detail::output_view(c, 3, a);
  EXPECT_EQ(v.lse_strides.head, 12);
  EXPECT_FLOAT_EQ(v.lse_scale, 1.f);
  EXPECT_EQ(row_offset(v.lse_strides, 2, 3 * 16 + 5, v.heads), 2 * 4 + 3 * 1 + 5 * 12);
  a.out_strides = {4 * 16 * 1024, 16 * 1024, 1022};
  EXPECT_NE(error_of([&] { detail::output_view(c, 3, a); }).find("out head stride (1022) must be positive and a multiple of 4"),
            std::string::npos);
  a.out_strides = {0, 16 * 1024, 1024};  // batch 3 needs a batch stride
  EXPECT_NE(error_of([&] { detail::output_view(c, 3, a); }).find("out batch stride (0)"), std::string::npos);
  EXPECT_EQ(error_of([&] { detail::output_view(c, 1, a); }), "(no error)");  // ...batch 1 does not
}

TEST(DecodeArgsChecks, QMustFlattenToOneRowStride) {
  DecodeConfig c;
  c.heads = 16;
  c.q_len = 2;
  c.softmax_scale = 0.1f;
  alignas(16) static char buf[64];
  DecodeArgs a;
  a.q = buf;
  detail::QMapCache cache;
  sm90::QMaps maps;
  int col = 0;
  // [heads, tokens]-major Q (head stride = tokens x 576): rows do not flatten.
  a.q_strides = {2 * 576, 576, 4 * 576};
  EXPECT_NE(error_of([&] { detail::q_maps_for(c, 2, a, cache, maps, col); }).find("do not flatten to one row stride"),
            std::string::npos);
  // Rows of 580 elements: flat, but not a multiple of 8.
  a.q_strides = {2 * 16 * 580, 16 * 580, 580};
  EXPECT_NE(error_of([&] { detail::q_maps_for(c, 2, a, cache, maps, col); }).find("row stride (580 elements)"),
            std::string::npos);
  // q_pe with d_qk 512.
  a.q_strides = {};
  a.q_pe = buf;
  c.d_qk = 512;
  EXPECT_NE(error_of([&] { detail::q_maps_for(c, 2, a, cache, maps, col); }).find("q_pe is given but d_qk is 512"),
            std::string::npos);
}

// 16 heads, q_len 2, an fp8 cache.
DecodeConfig fp8_config() {
  DecodeConfig c;
  c.heads = 16;
  c.q_len = 2;
  c.softmax_scale = 0.1f;
  c.kv_dtype = KvDtype::kFp8E4m3;
  return c;
}

TEST(DecodeArgsChecks, QSourceOfTheFp8Quantiser) {
  // The fp8 path reads Q through check_q (the quantiser takes raw rows, not TMA maps):
  // the same checks, and the row strides it hands the quantiser.
  const DecodeConfig c = fp8_config();
  alignas(16) static char buf[64];
  DecodeArgs a;
  a.q = buf;
  detail::QSource q = detail::check_q(c, 3, a);
  EXPECT_FALSE(q.split);
  EXPECT_EQ(q.latent_cols, 576);
  EXPECT_EQ(q.rows, 3 * 2 * 16);
  EXPECT_EQ(q.q_row, 576);
  // q_nope rows inside a wider buffer, q_pe dense.
  a.q_pe = buf;
  a.q_strides = {2 * 16 * 640, 16 * 640, 640};
  q = detail::check_q(c, 3, a);
  EXPECT_TRUE(q.split);
  EXPECT_EQ(q.latent_cols, 512);
  EXPECT_EQ(q.q_row, 640);
  EXPECT_EQ(q.pe_row, 64);
  a.q = buf + 8;  // not 16-byte aligned
  EXPECT_NE(error_of([&] { detail::check_q(c, 3, a); }).find("q must be a non-null, 16-byte aligned"),
            std::string::npos);
}

TEST(DecodeArgsChecks, E4m3QIsOneTensorOf16ByteRows) {
  const DecodeConfig c = fp8_config();
  alignas(16) static char buf[64];
  DecodeArgs a;
  a.q = buf;
  a.q_dtype = QDtype::kFp8E4m3;
  EXPECT_EQ(detail::check_e4m3_q(c, 3, a), 576);
  a.q_strides = {2 * 16 * 640, 16 * 640, 640};
  EXPECT_EQ(detail::check_e4m3_q(c, 3, a), 640);
  a.q_strides = {2 * 16 * 584, 16 * 584, 584};  // a multiple of 8 bytes, not of 16
  EXPECT_NE(error_of([&] { detail::check_e4m3_q(c, 3, a); }).find("row stride (584 elements) must be >= 576 and a "
                                                                   "multiple of 16"),
            std::string::npos);
  a.q_strides = {};
  a.q_pe = buf;
  EXPECT_NE(error_of([&] { detail::check_e4m3_q(c, 3, a); }).find("q_pe must be null"), std::string::npos);
  a.q_pe = nullptr;
  a.q = buf + 8;
  EXPECT_NE(error_of([&] { detail::check_e4m3_q(c, 3, a); }).find("16-byte aligned"), std::string::npos);
}

TEST(Dcp, PartialLayoutAndMergeChecks) {
  const DcpPartialLayout l = dcp_partial_layout(3, 4, 16);
  EXPECT_EQ(l.out_offset, 0u);
  EXPECT_EQ(l.lse_offset, size_t(3 * 4 * 16 * 512 * 2));
  EXPECT_GE(l.bytes, l.lse_offset + 3 * 4 * 16 * 4);
  EXPECT_EQ(l.bytes % 256, 0u);
  DcpMergeArgs m;
  m.batch = 3;
  m.world = 0;
  EXPECT_NE(error_of([&] { dcp_merge(m); }).find("world (0) must be in 1..1024"), std::string::npos);
  EXPECT_NE(error_of([&] { dcp_partial_layout(1, 17, 16); }).find("q_len (17)"), std::string::npos);
}

}  // namespace
}  // namespace kbmla
