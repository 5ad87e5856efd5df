// bench --balance's per-CTA busy intervals and the combine blocks' spans.
#include <gtest/gtest.h>

#include "tools/balance_records.hpp"

namespace kbmla::tools {
namespace {

// Three CTAs, one of them without items; three combine records, one never written.
// Timestamps in ns.
TEST(BalanceRecords, BusyIntervalsAndTheCombineAroundTheDecodesEnd) {
  const std::vector<unsigned long long> ctas = {
      10000, 40000, 7, 2,   // 30 us busy on SM 7
      12000, 52000, 9, 1,   // 40 us on SM 9: the decode ends at 52 us
      0,     60000, 3, 0};  // no items: not an interval, but its end still counts
  const std::vector<unsigned long long> combine = {49000, 53000, 0, 0, 60500, 64000};
  const BalanceSummary s = summarize_balance(ctas, 3, combine, 3);
  ASSERT_EQ(s.intervals.size(), 2u);
  EXPECT_DOUBLE_EQ(s.intervals[0][0], 0.0);  // from the first CTA with items
  EXPECT_DOUBLE_EQ(s.intervals[0][1], 30.0);
  EXPECT_DOUBLE_EQ(s.intervals[0][2], 7.0);
  EXPECT_DOUBLE_EQ(s.intervals[1][0], 2.0);
  EXPECT_DOUBLE_EQ(s.intervals[1][1], 42.0);
  EXPECT_DOUBLE_EQ(s.busy_mean_us, 35.0);
  EXPECT_DOUBLE_EQ(s.busy_max_us, 40.0);
  EXPECT_DOUBLE_EQ(s.busy_max_over_mean, 40.0 / 35.0);
  // The decode's end is the latest CTA end (60 us, the CTA without items included); a block
  // that started before it (an early merge) reads negative.
  ASSERT_EQ(s.combine_intervals.size(), 2u);
  EXPECT_DOUBLE_EQ(s.combine_intervals[0][0], -11.0);
  EXPECT_DOUBLE_EQ(s.combine_intervals[0][1], -7.0);
  EXPECT_DOUBLE_EQ(s.combine_start_us, -11.0);
  EXPECT_DOUBLE_EQ(s.combine_end_us, 4.0);
}

// Each interval names its CTA, so that bench can put the planned work beside it: a CTA
// without items leaves no interval and shifts the rest.
TEST(BalanceRecords, IntervalsNameTheirCtas) {
  const std::vector<unsigned long long> ctas = {0, 5000, 1, 0,  // no items
                                                1000, 9000, 4, 3, 2000, 7000, 5, 1};
  const BalanceSummary s = summarize_balance(ctas, 3, {}, 0);
  ASSERT_EQ(s.intervals.size(), 2u);
  EXPECT_EQ(s.interval_cta, (std::vector<int>{1, 2}));
  EXPECT_DOUBLE_EQ(s.intervals[1][2], 5.0);
}

TEST(BalanceRecords, NoCombineAndNoItems) {
  const BalanceSummary s = summarize_balance({0, 0, 0, 0}, 1, {}, 0);
  EXPECT_TRUE(s.intervals.empty());
  EXPECT_TRUE(s.combine_intervals.empty());
  EXPECT_EQ(s.combine_start_us, -1);
  EXPECT_EQ(s.busy_max_over_mean, 0);
}

}  // namespace
}  // namespace kbmla::tools
