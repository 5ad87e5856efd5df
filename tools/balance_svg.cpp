#include "tools/balance_svg.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>

#include "kbmla/error.hpp"

namespace kbmla::tools {

void write_balance_svg(const std::string& path, const std::string& case_name, const std::vector<BalancePanel>& ms) {
  double t0 = 1e300, t1 = 0;
  size_t max_rows = 1;
  for (const auto& m : ms) {
    for (const auto& iv : m.intervals) {
      t0 = std::min(t0, iv[0]);
      t1 = std::max(t1, iv[1]);
      max_rows = std::max(max_rows, size_t(iv[2]) + 1);
    }
  }
  if (t1 <= t0) return;
  const double panel_w = 420, row_h = std::max(1.0, std::min(4.0, 400.0 / double(max_rows))), top = 40, gap = 30;
  const double panel_h = row_h * double(max_rows);
  const double width = gap + double(ms.size()) * (panel_w + gap);
  const double height = top + panel_h + 50;
  std::ofstream f(path);
  require(f.good(), "bench: cannot write '", path, "'");
  f << fmt::format("<svg xmlns='http://www.w3.org/2000/svg' width='{:.0f}' height='{:.0f}' font-family='sans-serif' "
                   "font-size='12'>\n<rect width='100%' height='100%' fill='white'/>\n",
                   width, height);
  f << fmt::format("<text x='{}' y='18' font-size='14'>{}: CTA busy intervals (%globaltimer), one row per SM, "
                   "common time axis {:.0f} us</text>\n",
                   gap, case_name, t1 - t0);
  for (size_t k = 0; k < ms.size(); ++k) {
    const BalancePanel& m = ms[k];
    const double x0 = gap + double(k) * (panel_w + gap);
    f << fmt::format("<text x='{:.0f}' y='{:.0f}'>{} (busy max/mean {:.3f})</text>\n", x0, top - 6, m.policy,
                     m.busy_max_over_mean);
    f << fmt::format("<rect x='{:.0f}' y='{:.0f}' width='{:.0f}' height='{:.1f}' fill='none' stroke='#999'/>\n", x0,
                     top, panel_w, panel_h);
    for (const auto& iv : m.intervals) {
      const double a = x0 + (iv[0] - t0) / (t1 - t0) * panel_w;
      const double b = x0 + (iv[1] - t0) / (t1 - t0) * panel_w;
      f << fmt::format("<rect x='{:.1f}' y='{:.1f}' width='{:.1f}' height='{:.1f}' fill='#3b6ea8' stroke='white' "
                       "stroke-width='0.2'/>\n",
                       a, top + iv[2] * row_h, std::max(0.5, b - a), std::max(0.5, row_h * 0.8));
    }
    f << fmt::format("<text x='{:.0f}' y='{:.0f}'>0</text><text x='{:.0f}' y='{:.0f}' text-anchor='end'>{:.0f} us</text>\n",
                     x0, top + panel_h + 16, x0 + panel_w, top + panel_h + 16, t1 - t0);
  }
  f << "</svg>\n";
}


}  // namespace kbmla::tools
