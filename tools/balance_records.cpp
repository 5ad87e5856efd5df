#include "tools/balance_records.hpp"

#include <algorithm>

namespace kbmla::tools {

BalanceSummary summarize_balance(const std::vector<unsigned long long>& rec, int ctas,
                                 const std::vector<unsigned long long>& crec, int combine_blocks) {
  BalanceSummary s;
  unsigned long long decode_end = 0, first = ~0ull;
  for (int c = 0; c < ctas; ++c) {
    decode_end = std::max(decode_end, rec[4 * c + 1]);
    if (rec[4 * c + 3] != 0) first = std::min(first, rec[4 * c]);
  }
  for (int k = 0; decode_end > 0 && k < combine_blocks; ++k) {
    if (crec[2 * k] == 0) continue;  // an entry no block wrote
    s.combine_intervals.push_back(
        {(double(crec[2 * k]) - double(decode_end)) / 1e3, (double(crec[2 * k + 1]) - double(decode_end)) / 1e3});
  }
  if (!s.combine_intervals.empty()) {
    s.combine_start_us = s.combine_intervals[0][0];
    s.combine_end_us = s.combine_intervals[0][1];
    for (const auto& iv : s.combine_intervals) {
      s.combine_start_us = std::min(s.combine_start_us, iv[0]);
      s.combine_end_us = std::max(s.combine_end_us, iv[1]);
    }
  }
  double sum = 0, mx = 0;
  int n = 0;
  for (int c = 0; c < ctas; ++c) {
    if (rec[4 * c + 3] == 0) continue;  // a CTA without items
    s.intervals.push_back(
        {double(rec[4 * c] - first) / 1e3, double(rec[4 * c + 1] - first) / 1e3, double(rec[4 * c + 2])});
    s.interval_cta.push_back(c);
    const double busy = double(rec[4 * c + 1] - rec[4 * c]) / 1e3;
    sum += busy;
    mx = std::max(mx, busy);
    ++n;
  }
  if (n > 0) {
    s.busy_mean_us = sum / n;
    s.busy_max_us = mx;
    s.busy_max_over_mean = mx / s.busy_mean_us;
  }
  return s;
}

}  // namespace kbmla::tools
