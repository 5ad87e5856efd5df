#include "reference/random_problem.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include "kbmla/error.hpp"

namespace kbmla::ref {

namespace {
template <class T>
T from_float(float f);
template <>
float from_float<float>(float f) { return f; }
template <>
Bf16 from_float<Bf16>(float f) { return float_to_bf16(f); }
}  // namespace

template <class T>
RandomProblem<T> make_random_problem(const Problem& shape, const std::vector<int32_t>& seqlens, uint64_t seed,
                                     int spare_pages) {
  require(seqlens.size() == size_t(shape.batch), "random problem: ", seqlens.size(), " seqlens for batch ",
          shape.batch);
  require(spare_pages >= 0, "random problem: spare_pages (", spare_pages, ") must be >= 0");
  RandomProblem<T> r;
  r.problem = shape;
  r.seqlens = seqlens;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> uni(-1.f, 1.f);
  int max_pages = 1;
  int64_t used_pages = 0;
  for (int32_t L : seqlens) {
    const int pages = (std::max(L, 0) + shape.page_size - 1) / shape.page_size;
    max_pages = std::max(max_pages, pages + 1);  // one spare column, poisoned
    used_pages += pages;
  }
  r.problem.max_pages = max_pages;
  r.problem.num_pages = used_pages + spare_pages;
  std::vector<int32_t> order(r.problem.num_pages);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  r.block_table.assign(size_t(shape.batch) * max_pages, kPoisonPageIndex);
  const T nan = from_float<T>(std::numeric_limits<float>::quiet_NaN());
  r.cache.assign(size_t(r.problem.num_pages) * shape.page_size * shape.d_qk, nan);
  size_t next = 0;
  for (int b = 0; b < shape.batch; ++b) {
    const int L = std::max(seqlens[b], 0);
    const int pages = (L + shape.page_size - 1) / shape.page_size;
    for (int j = 0; j < pages; ++j) {
      const int32_t page = order[next++];
      r.block_table[size_t(b) * max_pages + j] = page;
      // Fill only the token rows below the seqlen; the tail of the last page stays NaN.
      const int tokens = std::min(shape.page_size, L - j * shape.page_size);
      T* dst = &r.cache[size_t(page) * shape.page_size * shape.d_qk];
      for (size_t e = 0; e < size_t(tokens) * shape.d_qk; ++e) dst[e] = from_float<T>(uni(rng));
    }
  }
  r.q.resize(size_t(shape.batch) * shape.q_len * shape.heads * shape.d_qk);
  for (T& v : r.q) v = from_float<T>(uni(rng));
  return r;
}

template RandomProblem<float> make_random_problem<float>(const Problem&, const std::vector<int32_t>&, uint64_t, int);
template RandomProblem<Bf16> make_random_problem<Bf16>(const Problem&, const std::vector<int32_t>&, uint64_t, int);

}  // namespace kbmla::ref
