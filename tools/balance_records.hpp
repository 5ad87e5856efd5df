// kbmla bench --balance: each CTA's busy interval and the combine blocks' spans, from the
// decode's DecodeArgs::timeline records ({start ns, end ns, SM, items} per CTA) and the
// combine's ({first task ready ns, end ns} per block; combine.hpp, CombineParams::timeline).
#pragma once

#include <array>
#include <vector>

namespace kbmla::tools {

struct BalanceSummary {
  // Per CTA with items: {start, end, SM}, us from the first such CTA's start.
  std::vector<std::array<double, 3>> intervals;
  std::vector<int> interval_cta;  // each interval's CTA (its linear block index)
  // Per combine block that wrote its record: {start, end}, us after the decode's last CTA
  // ended (negative: before it, as early merges start).
  std::vector<std::array<double, 2>> combine_intervals;
  double combine_start_us = -1, combine_end_us = -1;  // their extremes (-1: none)
  double busy_mean_us = 0, busy_max_us = 0, busy_max_over_mean = 0;  // per CTA with items
};

BalanceSummary summarize_balance(const std::vector<unsigned long long>& cta_records, int ctas,
                                 const std::vector<unsigned long long>& combine_records, int combine_blocks);

}  // namespace kbmla::tools
