#include "tools/item_phases.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "kbmla/work_format.hpp"

namespace kbmla::tools {

ItemPhases summarize_item_phases(const std::vector<unsigned long long>& cta_records,
                                 const std::vector<unsigned long long>& item_records, int ctas) {
  ItemPhases ph;
  for (int c = 0; c < ctas; ++c) {
    const int items = int(std::min<unsigned long long>(cta_records[4 * size_t(c) + 3], kTimelineItems));
    unsigned long long previous_end = cta_records[4 * size_t(c)];  // the CTA's start
    for (int i = 0; i < items; ++i) {
      const unsigned long long* t = &item_records[kItemPhaseSlots * (size_t(c) * kTimelineItems + size_t(i))];
      if (std::any_of(t, t + kItemPhases, [](unsigned long long x) { return x == 0; })) break;
      auto& sum = i == 0 ? ph.first : ph.later;
      // (Signed: the CTA's start is taken by another thread, so the first lead-in may be
      // slightly negative.)
      sum[0] += (double(t[0]) - double(previous_end)) / 1e3;
      for (int k = 1; k < kItemPhases; ++k) sum[k] += (double(t[k]) - double(t[k - 1])) / 1e3;
      ++(i == 0 ? ph.first_items : ph.later_items);
      previous_end = t[kItemPhases - 1];
    }
  }
  for (double& x : ph.first) x /= std::max(ph.first_items, 1);
  for (double& x : ph.later) x /= std::max(ph.later_items, 1);
  return ph;
}

std::string format_item_phases(const ItemPhases& ph) {
  if (ph.empty()) return {};
  auto phases = [](const std::array<double, ItemPhases::kPhases>& a) {
    return fmt::format("{:.1f}/{:.1f}/{:.1f}/{:.1f}/{:.1f}", a[0], a[1], a[2], a[3], a[4]);
  };
  std::string s = fmt::format("  items lead/q/stage/blocks/out: first {}", phases(ph.first));
  if (ph.later_items > 0) s += fmt::format(", later {} ({})", phases(ph.later), ph.later_items);
  return s;
}

nlohmann::json item_phases_json(const ItemPhases& ph) {
  auto obj = [](const std::array<double, ItemPhases::kPhases>& a, int n) {
    return nlohmann::json{{"items", n},         {"lead_in_us", a[0]}, {"q_ready_us", a[1]},
                          {"first_stage_us", a[2]}, {"blocks_us", a[3]},  {"output_us", a[4]}};
  };
  return {{"first", obj(ph.first, ph.first_items)}, {"later", obj(ph.later, ph.later_items)}};
}

}  // namespace kbmla::tools
