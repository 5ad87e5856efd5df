// kbmla bench: where a case's cache pages lie. The block table maps each request's pages to
// cache pages in a random order over the whole cache (the worst case for an allocator's
// fragmentation), optionally in runs of physically consecutive pages (--page-runs).
#pragma once

#include <cstdint>
#include <vector>

namespace kbmla::tools {

// A permutation of 0..num_pages-1 made of runs of `run` consecutive pages (the last one
// shorter when run does not divide num_pages), the runs in a random order drawn from
// std::mt19937_64(seed). run 1: std::shuffle of 0..num_pages-1 (the order bench used
// before --page-runs). Throws kbmla::Error unless num_pages is in 0..2^31-1 and run >= 1.
std::vector<int32_t> random_page_order(int64_t num_pages, int run, uint64_t seed);

}  // namespace kbmla::tools
