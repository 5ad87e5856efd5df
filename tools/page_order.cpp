#include "tools/page_order.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "kbmla/error.hpp"

namespace kbmla::tools {

std::vector<int32_t> random_page_order(int64_t num_pages, int run, uint64_t seed) {
  require(num_pages >= 0 && num_pages <= std::numeric_limits<int32_t>::max(), "page order: num_pages (", num_pages,
          ") must be in 0..2^31-1");
  require(run >= 1, "page order: run (", run, ") must be >= 1");
  std::vector<int64_t> runs(static_cast<size_t>((num_pages + run - 1) / run));
  std::iota(runs.begin(), runs.end(), 0);
  std::shuffle(runs.begin(), runs.end(), std::mt19937_64(seed));
  std::vector<int32_t> order;
  order.reserve(static_cast<size_t>(num_pages));
  for (const int64_t r : runs) {
    for (int64_t k = r * run; k < std::min<int64_t>((r + 1) * run, num_pages); ++k) order.push_back(int32_t(k));
  }
  return order;
}

}  // namespace kbmla::tools
