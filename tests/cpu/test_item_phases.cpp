// bench --balance's per-item phases: the summary of DecodeArgs::item_timeline records.
#include <gtest/gtest.h>

#include "kbmla/work_format.hpp"
#include "tools/item_phases.hpp"

namespace kbmla::tools {
namespace {

// Two CTAs: CTA 0 with two items, CTA 1 with one; CTA 2 has no items. Timestamps in ns.
TEST(ItemPhases, FirstAndLaterItemsAreAveragedPerPhase) {
  const int ctas = 3;
  std::vector<unsigned long long> cta(4 * ctas, 0), items(size_t(kItemPhaseSlots) * kTimelineItems * ctas, 0);
  auto set = [&](int c, int i, std::array<unsigned long long, 5> t) {
    for (int k = 0; k < kItemPhases; ++k) items[kItemPhaseSlots * (size_t(c) * kTimelineItems + i) + k] = t[k];
  };
  cta[0] = 1000, cta[3] = 2;  // CTA 0 starts at 1 us, two items
  set(0, 0, {2000, 3000, 5000, 15000, 16000});
  set(0, 1, {18000, 18500, 19000, 29000, 31000});
  cta[4] = 1000, cta[7] = 1;
  set(1, 0, {4000, 5000, 7000, 17000, 18000});
  // An item past the CTA's count is ignored, as are CTAs without items.
  set(1, 1, {1, 2, 3, 4, 5});
  const ItemPhases ph = summarize_item_phases(cta, items, ctas);
  ASSERT_EQ(ph.first_items, 2);
  ASSERT_EQ(ph.later_items, 1);
  EXPECT_DOUBLE_EQ(ph.first[0], 2.0);   // lead-in: (1 + 3) / 2 us
  EXPECT_DOUBLE_EQ(ph.first[1], 1.0);   // Q
  EXPECT_DOUBLE_EQ(ph.first[2], 2.0);   // first stage
  EXPECT_DOUBLE_EQ(ph.first[3], 10.0);  // blocks
  EXPECT_DOUBLE_EQ(ph.first[4], 1.0);   // output
  EXPECT_DOUBLE_EQ(ph.later[0], 2.0);   // from the previous item's output
  EXPECT_DOUBLE_EQ(ph.later[1], 0.5);
  EXPECT_DOUBLE_EQ(ph.later[2], 0.5);
  EXPECT_DOUBLE_EQ(ph.later[3], 10.0);
  EXPECT_DOUBLE_EQ(ph.later[4], 2.0);
  EXPECT_NE(format_item_phases(ph).find("later"), std::string::npos);
  EXPECT_EQ(item_phases_json(ph)["later"]["items"], 1);
}

// An item some phase of which was not written (a timestamp of 0) ends the CTA's items;
// a summary without items prints nothing.
TEST(ItemPhases, UnwrittenPhasesEndTheCtasItems) {
  std::vector<unsigned long long> cta = {1000, 0, 0, 3}, items(size_t(8) * kTimelineItems, 0);
  for (int k = 0; k < 5; ++k) items[k] = 2000 + 1000 * k;
  items[8 + 0] = 7000;  // item 1: only its start
  const ItemPhases ph = summarize_item_phases(cta, items, 1);
  EXPECT_EQ(ph.first_items, 1);
  EXPECT_EQ(ph.later_items, 0);
  EXPECT_EQ(format_item_phases(ph).find("later"), std::string::npos);
  EXPECT_EQ(format_item_phases(summarize_item_phases(cta, std::vector<unsigned long long>(items.size(), 0), 1)), "");
}

}  // namespace
}  // namespace kbmla::tools
