// kbmla bench's page placement (tools/page_order.cpp): a permutation of the cache's pages,
// in runs of consecutive pages, reproducible from its seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kbmla/error.hpp"
#include "tools/page_order.hpp"

namespace kbmla::tools {
namespace {

TEST(PageOrder, IsAPermutationInRunsOfConsecutivePages) {
  for (const int run : {1, 2, 3, 4, 64}) {
    for (const int64_t pages : {0, 1, 7, 64, 1001}) {
      const std::vector<int32_t> order = random_page_order(pages, run, 7);
      ASSERT_EQ(int64_t(order.size()), pages);
      std::vector<int32_t> sorted = order;
      std::sort(sorted.begin(), sorted.end());
      for (int64_t i = 0; i < pages; ++i) ASSERT_EQ(sorted[size_t(i)], i) << "run " << run << ", pages " << pages;
      // Each run starts at a multiple of `run` and continues page by page to its end.
      for (size_t i = 0; i < order.size(); ++i) {
        if (order[i] % run != 0) {
          ASSERT_GT(i, 0u);
          EXPECT_EQ(order[i], order[i - 1] + 1) << "run " << run << ", position " << i;
        }
      }
    }
  }
}

TEST(PageOrder, RunOfOneIsTheShuffleBenchUsedBefore) {
  std::vector<int32_t> want(500);
  std::iota(want.begin(), want.end(), 0);
  std::shuffle(want.begin(), want.end(), std::mt19937_64(7));
  EXPECT_EQ(random_page_order(500, 1, 7), want);
  EXPECT_EQ(random_page_order(500, 4, 7), random_page_order(500, 4, 7));
  EXPECT_NE(random_page_order(500, 4, 7), random_page_order(500, 4, 8));
}

TEST(PageOrder, RejectsBadArguments) {
  EXPECT_THROW(random_page_order(-1, 1, 7), Error);
  EXPECT_THROW(random_page_order(10, 0, 7), Error);
  EXPECT_THROW(random_page_order(int64_t{1} << 31, 1, 7), Error);
}

}  // namespace
}  // namespace kbmla::tools
