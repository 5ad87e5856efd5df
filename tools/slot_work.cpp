#include "tools/slot_work.hpp"

#include "kbmla/work_format.hpp"

namespace kbmla::tools {

std::vector<SlotWork> slot_work(const HostPlan& h) {
  const int A = h.counts.num_active_clusters;
  std::vector<SlotWork> out(size_t(A > 0 ? A : 0));
  // Slot g's entries sit at g, g + A, g + 2A, ... up to the first negative one
  // (planner_core.hpp, work-list form).
  for (int g = 0; g < A; ++g) {
    SlotWork& s = out[size_t(g)];
    for (int64_t i = g; i < int64_t(h.work_list.size()) && h.work_list[size_t(i)] >= 0; i += A) {
      const int32_t e = h.work_list[size_t(i)];
      const int b = work_entry_tile_batch(e) % h.shape.batch, split = work_entry_split(e);
      if (h.num_splits[size_t(b)] == 0) continue;
      const int off = h.bounds_offset[size_t(b)];
      ++s.items;
      s.blocks += h.bounds[size_t(off + split + 1)] - h.bounds[size_t(off + split)];
      if (h.num_splits[size_t(b)] > 1) ++s.split_items;
    }
  }
  return out;
}

}  // namespace kbmla::tools
