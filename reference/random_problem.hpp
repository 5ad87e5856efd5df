// Random, poisoned test problems in the paged-cache format: pages in random order,
// unused pages filled with NaN, unused block-table slots set to a huge page index, so a
// kernel (or the reference) that reads what it must not read produces NaN or faults.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "reference/reference.hpp"

namespace kbmla::ref {

constexpr int32_t kPoisonPageIndex = 0x3fffffff;

template <class T>
struct RandomProblem {
  Problem problem;
  std::vector<T> q;
  std::vector<T> cache;
  std::vector<int32_t> block_table;
  std::vector<int32_t> seqlens;

  Inputs<T> inputs() const { return {q, cache, block_table, seqlens}; }
};

// Values uniform in [-1, 1); `spare_pages` extra NaN pages are scattered among the used ones.
template <class T>
RandomProblem<T> make_random_problem(const Problem& shape, const std::vector<int32_t>& seqlens, uint64_t seed,
                                     int spare_pages = 3);

}  // namespace kbmla::ref
