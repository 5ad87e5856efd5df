// kbmla bench --svg-dir: the CTAs' busy intervals as an SVG timeline. One panel per policy,
// one row per SM, a bar for each CTA that ran there from its start to its end, all panels
// on one time axis from the earliest start: what balancing buys, at a glance (a row per
// CTA would be 4096 rows tall for the non-persistent static policy).
#pragma once

#include <array>
#include <string>
#include <vector>

namespace kbmla::tools {

struct BalancePanel {
  std::string policy;
  double busy_max_over_mean = 0;
  std::vector<std::array<double, 3>> intervals;  // per CTA with work: {start us, end us, SM}
};

// Writes nothing when no panel has an interval of positive length; throws kbmla::Error
// naming the path when the file cannot be written.
void write_balance_svg(const std::string& path, const std::string& case_name, const std::vector<BalancePanel>& panels);

}  // namespace kbmla::tools
