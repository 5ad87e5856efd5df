// kbmla bench --balance: where each item's time goes inside a CTA, from the decode's
// per-item timestamps (DecodeArgs::item_timeline).
#pragma once

#include <array>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kbmla/work_format.hpp"

namespace kbmla::tools {

// Means over the CTAs' items, in us. The first item of a CTA: from the CTA's start to the
// item's start, then Q ready, the first KV stage full, the blocks, the output written. A
// later item: the same phases, its start measured from the previous item's output.
struct ItemPhases {
  static constexpr int kPhases = kItemPhases;  // lead-in, Q, first stage, blocks, output
  std::array<double, kPhases> first{}, later{};
  int first_items = 0, later_items = 0;
  bool empty() const { return first_items == 0; }
};

// `cta_records`: {start, end, SM, items} per CTA (DecodeArgs::timeline); `item_records`:
// DecodeArgs::item_timeline of the same decode.
ItemPhases summarize_item_phases(const std::vector<unsigned long long>& cta_records,
                                 const std::vector<unsigned long long>& item_records, int ctas);
std::string format_item_phases(const ItemPhases& ph);
nlohmann::json item_phases_json(const ItemPhases& ph);

}  // namespace kbmla::tools
