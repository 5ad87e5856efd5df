#include <cstdio>
#include <random>
#include <vector>
#include "kbmla/planner_search.hpp"
using namespace kbmla;
int main() {
  std::mt19937_64 rng(99);
  unsigned long long h = 1469598103934665603ull;
  auto mix = [&](long long v) { h ^= (unsigned long long)v; h *= 1099511628211ull; };
  for (int i = 0; i < 20000; ++i) {
    PlanShape p;
    p.heads = std::uniform_int_distribution<int>(1, 128)(rng);
    p.q_len = std::uniform_int_distribution<int>(1, 16)(rng);
    p.cluster_size = p.heads * p.q_len > 64 ? 2 : 1; p.tile_rows = 64 * p.cluster_size;
    p.num_ctas = std::uniform_int_distribution<int>(1, 264)(rng) / p.cluster_size * p.cluster_size;
    if (p.num_ctas < p.cluster_size) p.num_ctas = p.cluster_size;
    p.causal = rng() % 4 != 0;
    p.fixed_grid = rng() % 2;
    if (rng() % 10 == 0) p.fixed_split_blocks = 8 + rng() % 64;
    p.cost = {int64_t(500 + rng() % 3000), int64_t(1000 + rng() % 9000), int64_t(1000 + rng() % 5000)};
    p.batch = 1 + rng() % (i % 5 == 0 ? 600 : 40);
    std::vector<int32_t> s(p.batch);
    for (auto& x : s) { int k = rng() % 4; x = k == 0 ? 0 : k == 1 ? rng() % 300 : (rng() % (1 << 20)) >> (rng() % 12); }
    PlanCounts c = plan_measure(p, s.data());
    mix(c.status); mix(c.cap); mix(c.whole_requests); mix(c.work_list_len); mix(c.num_items); mix(c.num_bounds); mix(c.num_slots); mix(c.num_zero_fill); mix(c.max_items_per_cluster); mix(c.num_active_clusters);
    if (c.status) continue;
    std::vector<int32_t> wl(c.work_list_len), ns(p.batch), fs(p.batch), bo(p.batch), b(c.num_bounds), zf(c.num_zero_fill);
    std::vector<int64_t> cc(c.num_clusters);
    PlanBuffers out{wl.data(), c.work_list_len, ns.data(), fs.data(), bo.data(), b.data(), c.num_bounds, zf.data(), c.num_zero_fill, cc.data()};
    mix(plan_write(p, s.data(), c, out));
    for (auto v : wl) mix(v); for (auto v : ns) mix(v); for (auto v : fs) mix(v); for (auto v : bo) mix(v); for (auto v : b) mix(v); for (auto v : zf) mix(v); for (auto v : cc) mix(v);
  }
  printf("%016llx\n", h);
}
