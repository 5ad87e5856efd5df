// The seed's helpers: every documented behaviour and error, and the fast divmod.
#include <gtest/gtest.h>

#include <random>

#include "kbmla/error.hpp"
#include "kbmla/fast_divmod.hpp"
#include "kbmla/helpers.hpp"

namespace kbmla {
namespace {

TEST(QTileLayout, RowsCrossQueryTokenBoundaries) {
  auto l = compute_q_tile_layout(16, 4, 64);  // 16 heads x 4 tokens fill one tile exactly
  EXPECT_EQ(l.total_rows, 64);
  EXPECT_EQ(l.num_tiles, 1);
  EXPECT_EQ(l.last_tile_rows, 64);
  l = compute_q_tile_layout(24, 4, 64);  // 96 rows: 64 + 32
  EXPECT_EQ(l.num_tiles, 2);
  EXPECT_EQ(l.last_tile_rows, 32);
  l = compute_q_tile_layout(1, 1, 128);
  EXPECT_EQ(l.total_rows, 1);
  EXPECT_EQ(l.num_tiles, 1);
  EXPECT_EQ(l.last_tile_rows, 1);
  l = compute_q_tile_layout(128, 9, 128);
  EXPECT_EQ(l.num_tiles, 9);
  EXPECT_EQ(l.last_tile_rows, 128);
}

TEST(QTileLayout, TailIsAlwaysInOneToM) {
  for (int m : {1, 7, 64, 128}) {
    for (int h = 1; h <= m && h <= 40; ++h) {
      for (int q = 1; q <= 17; ++q) {
        auto l = compute_q_tile_layout(h, q, m);
        EXPECT_EQ(l.total_rows, h * q);
        EXPECT_GE(l.last_tile_rows, 1);
        EXPECT_LE(l.last_tile_rows, m);
        EXPECT_EQ((l.num_tiles - 1) * m + l.last_tile_rows, h * q);
      }
    }
  }
}

TEST(QTileLayout, RejectsNonPositiveAndHeadsAboveM) {
  EXPECT_THROW(compute_q_tile_layout(0, 1, 64), Error);
  EXPECT_THROW(compute_q_tile_layout(1, 0, 64), Error);
  EXPECT_THROW(compute_q_tile_layout(1, 1, 0), Error);
  EXPECT_THROW(compute_q_tile_layout(-3, 1, 64), Error);
  try {
    compute_q_tile_layout(65, 1, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("heads (65)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1..64"), std::string::npos) << e.what();
  }
}

TEST(FoldFactor, LargestDivisorOfQLenNotAboveMOverHeads) {
  EXPECT_EQ(fold_q_len_factor(16, 4, 64), 4);
  EXPECT_EQ(fold_q_len_factor(16, 8, 64), 4);   // 64/16 = 4 divides 8
  EXPECT_EQ(fold_q_len_factor(16, 9, 64), 3);   // max 4: 4 does not divide 9, 3 does
  EXPECT_EQ(fold_q_len_factor(16, 7, 64), 1);   // 7 is prime and above 4
  EXPECT_EQ(fold_q_len_factor(128, 4, 128), 1);
  EXPECT_EQ(fold_q_len_factor(16, 4), 4);       // default M = 128: min(4, 8)
  EXPECT_EQ(fold_q_len_factor(16, 16), 8);
  EXPECT_EQ(fold_q_len_factor(200, 4, 128), 1); // heads above M: no fold
  // Brute force against the seed's loop.
  for (int h = 1; h <= 130; ++h) {
    for (int q = 1; q <= 16; ++q) {
      int expect = 1;
      for (int c = std::min(q, 128 / h); c > 1; --c) {
        if (q % c == 0) { expect = c; break; }
      }
      EXPECT_EQ(fold_q_len_factor(h, q), expect) << h << " " << q;
    }
  }
}

TEST(FoldFactor, NonPositiveInputReturnsOneLikeTheSeed) {
  EXPECT_EQ(fold_q_len_factor(0, 4, 64), 1);
  EXPECT_EQ(fold_q_len_factor(16, 0, 64), 1);
  EXPECT_EQ(fold_q_len_factor(16, 4, 0), 1);
  EXPECT_EQ(fold_q_len_factor(-1, -1, -1), 1);
}

TEST(ArchCheck, AcceptsSm90AndSm100Family) {
  EXPECT_EQ(decode_arch_name({9, 0}), "sm_90");
  EXPECT_EQ(decode_arch_name({10, 0}), "sm_100");
  EXPECT_EQ(decode_arch_name({10, 3}), "sm_103");
  EXPECT_EQ(decode_arch_name({10, 7}), "sm_107");
}

TEST(ArchCheck, RejectsEverythingElseNamingTheCapability) {
  for (ComputeCapability cc : {ComputeCapability{8, 0}, {8, 9}, {9, 1}, {10, 1}, {12, 0}, {0, 0}}) {
    try {
      decode_arch_name(cc);
      FAIL() << cc.major << "." << cc.minor;
    } catch (const Error& e) {
      std::string want = std::to_string(cc.major) + "." + std::to_string(cc.minor);
      EXPECT_NE(std::string(e.what()).find("got " + want), std::string::npos) << e.what();
    }
  }
}

TEST(Tilers, Sm100RulesUnchanged) {
  const DecodeTilers def{{128, 128}, {128, 256}}, small{{64, 128}, {64, 256}};
  EXPECT_EQ(select_decode_tilers(16, 4, false, {10, 0}), def);
  EXPECT_EQ(select_decode_tilers(16, 4, true, {10, 0}), small);   // tuned H=16, S_q=4
  EXPECT_EQ(select_decode_tilers(64, 1, true, {10, 0}), small);
  EXPECT_EQ(select_decode_tilers(65, 1, true, {10, 0}), def);
  EXPECT_EQ(select_decode_tilers(16, 4, true, {10, 3}), def);     // sm_100 exactly
  EXPECT_EQ(select_decode_tilers(16, 4, true, {10, 7}), def);
}

TEST(Tilers, Sm90UsesOneWarpgroupRowsAnd64TokenStages) {
  const DecodeTilers sm90{{64, 64}, {64, 256}};
  for (bool fp8 : {false, true}) {
    EXPECT_EQ(select_decode_tilers(16, 1, fp8, {9, 0}), sm90);
    EXPECT_EQ(select_decode_tilers(128, 9, fp8, {9, 0}), sm90);
  }
  EXPECT_EQ(sm90_cluster_size(16, 4), 1);
  EXPECT_EQ(sm90_cluster_size(64, 1), 1);
  EXPECT_EQ(sm90_cluster_size(96, 1), 2);
  EXPECT_EQ(sm90_cluster_size(16, 8), 2);
  EXPECT_THROW(sm90_cluster_size(129, 1), Error);
  EXPECT_THROW(sm90_cluster_size(16, 0), Error);
}

TEST(Tilers, RejectUnsupportedArchAndBadShapes) {
  EXPECT_THROW(select_decode_tilers(16, 1, false, {8, 0}), Error);
  EXPECT_THROW(select_decode_tilers(0, 1, false, {9, 0}), Error);
  EXPECT_THROW(select_decode_tilers(16, 0, true, {10, 0}), Error);
}

TEST(FastDivmod, MatchesIntegerDivision) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> num(0, INT32_MAX);
  for (int32_t d : {1, 2, 3, 5, 7, 16, 31, 63, 64, 65, 100, 127, 128, 132, 1000, 65535, 65536, 1 << 20,
                    (1 << 23) - 1, INT32_MAX}) {
    FastDivmod f(d);
    for (int32_t n : {0, 1, d - 1, d, int32_t(std::min<int64_t>(int64_t{d} + 1, INT32_MAX)), INT32_MAX, INT32_MAX - 1}) {
      int32_t r;
      EXPECT_EQ(f.divmod(n, r), n / d) << n << "/" << d;
      EXPECT_EQ(r, n % d);
    }
    for (int i = 0; i < 20000; ++i) {
      int32_t n = num(rng) >> (i % 31), r;
      ASSERT_EQ(f.divmod(n, r), n / d) << n << "/" << d;
      ASSERT_EQ(r, n % d);
    }
  }
}

}  // namespace
}  // namespace kbmla
