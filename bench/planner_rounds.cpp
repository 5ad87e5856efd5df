// The planner's cap-search rounds (one per first_fitting / first_fitting_with: what the
// device planner runs one after another, each a fill per warp) and the plans' caps, on
// batches shaped like the public cases and on random configurations. A CPU tool for
// changes to plan_search (planner_search.hpp): build it against two versions of the
// header (the old one first on the include path; both need RoundCountingProbes, v45 on:
// for an earlier one, add it) and compare the outputs.
// Built with the project (build/kbmla_planner_rounds), or from the repository root:
//   g++ -std=c++20 -O2 -I include -I . -o build-alt/planner_rounds bench/planner_rounds.cpp
// Run: planner_rounds            (the named cases: rounds, form, cap, items)
//      planner_rounds N          (N random configurations, a line each: rounds, whole form,
//                                 cap, status, the cap above the bound in probe spacings s1)
//      planner_rounds --cases F  (every case of a cases file, bench/cases.json, with each
//                                 cache dtype's cost model: rounds and cap)
//      planner_rounds --time F   (the host's plan_measure + plan_write per case of F, bf16
//                                 cost models: median of 31 timings, us)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kbmla/planner_search.hpp"

using namespace kbmla;

namespace {

PlanShape shape(int batch, int q_len, int heads, CostModel cost) {
  PlanShape s;
  s.batch = batch;
  s.q_len = q_len;
  s.heads = heads;
  s.causal = true;
  s.cluster_size = heads * q_len > 64 ? 2 : 1;
  s.tile_rows = 64 * s.cluster_size;
  s.kv_block = 64;
  s.num_ctas = 132;
  s.cost = cost;
  s.fixed_grid = true;
  return s;
}

int named_cases() {
  std::mt19937_64 rng(7);
  auto uni = [](int b, int L) { return std::vector<int32_t>(b, L); };
  auto logn = [&](int b, double mu, double sg) {
    std::lognormal_distribution<double> d(mu, sg);
    std::vector<int32_t> v(b);
    for (auto& x : v) x = std::min<int>(131072, std::max<int>(1, int(d(rng))));
    return v;
  };
  struct Case {
    const char* name;
    int batch, q_len, heads;
    std::vector<int32_t> seqlens;
  };
  std::vector<Case> cases;  // (bench/planner_trace.cu's, same seeds)
  cases.push_back({"B1_L131072_Sq1", 1, 1, 16, uni(1, 131072)});
  cases.push_back({"B4_L131072_Sq1", 4, 1, 16, uni(4, 131072)});
  cases.push_back({"B1_L1M_Sq4", 1, 4, 16, uni(1, 1 << 20)});
  {
    auto v = uni(128, 1024);
    v[0] = 131072;
    cases.push_back({"skew_Sq1", 128, 1, 16, v});
  }
  cases.push_back({"B64_L32768_Sq1", 64, 1, 16, uni(64, 32768)});
  cases.push_back({"B128_L4096_Sq4", 128, 4, 16, uni(128, 4096)});
  cases.push_back({"logn_B128_Sq4", 128, 4, 16, logn(128, 8.0, 1.2)});
  cases.push_back({"H128_Sq2_B128", 128, 2, 128, uni(128, 4096)});
  cases.push_back({"logn_B512_Sq1", 512, 1, 16, logn(512, 7.5, 1.5)});
  cases.push_back({"logn_B16_Sq4", 16, 4, 16, logn(16, 9.0, 1.2)});
  cases.push_back({"logn_B32_Sq1", 32, 1, 16, logn(32, 9.0, 1.2)});
  cases.push_back({"B32_Sq16_L8192", 32, 16, 16, uni(32, 8192)});
  cases.push_back({"kimi_B32_Sq9_H24", 32, 9, 24, uni(32, 8192)});
  for (const Case& c : cases) {
    const PlanShape s = shape(c.batch, c.q_len, c.heads, sm90_bf16_cost_model(c.heads * c.q_len));
    int rounds = 0;
    const PlanCounts pc = plan_measure_with(s, c.seqlens.data(), RoundCountingProbes{&rounds});
    printf("%-16s rounds %d whole %d cap %lld items %d\n", c.name, rounds, int(pc.whole_requests), (long long)pc.cap,
           pc.num_items);
  }
  return 0;
}

int random_cases(int n) {
  std::mt19937_64 rng(11);
  long total_rounds = 0;
  for (int i = 0; i < n; ++i) {
    int batch = 1 << (rng() % 12);
    batch = std::min(2048, batch + int(rng() % (batch + 1)));
    const int q_len = 1 + int(rng() % 16);
    constexpr int kHeads[] = {8, 12, 16, 24, 32, 64, 96, 128};
    const int heads = kHeads[rng() % 8];
    std::vector<int32_t> seqlens(batch);
    const int kind = int(rng() % 4);
    std::lognormal_distribution<double> d(6 + double(rng() % 5), 0.3 + double(rng() % 12) / 10.0);
    const int L = 1 + int(rng() % 65536);
    for (auto& x : seqlens) {
      x = kind == 0   ? L
          : kind == 1 ? std::min<int>(131072, std::max<int>(0, int(d(rng))))
          : kind == 2 ? int(rng() % (2 * L))
                      : (rng() % 8 == 0 ? 8 * L : L / 8 + 1);
    }
    const int model = int(rng() % 3);
    const int rows = heads * q_len;
    const CostModel cost = model == 0   ? sm90_bf16_cost_model(rows)
                           : model == 1 ? sm90_fp8_cost_model(rows)
                                        : sm90_fp8_block_cost_model(rows);
    const PlanShape s = shape(batch, q_len, heads, cost);
    int rounds = 0;
    const PlanCounts pc = plan_measure_with(s, seqlens.data(), RoundCountingProbes{&rounds});
    total_rounds += rounds;
    // The cap's excess over the overhead-free bound in units of the first round's probe
    // spacing s1 (planner_search.hpp).
    const plan_detail::SeqlenRequests reqs{&s, seqlens.data(), pc.num_q_tiles};
    int64_t total = 0;
    for (int b = 0; b < batch; ++b) total += reqs.terms(b).whole;
    const int G = s.num_ctas / s.cluster_size;
    const int64_t bound = std::max<int64_t>(1, (total + G - 1) / G);
    const int64_t s1 = int64_t{pc.num_q_tiles} * (cost.per_item + cost.per_split + cost.per_kv_block) / kCapProbes + 1;
    printf("%d %d %lld %d %.2f\n", rounds, int(pc.whole_requests), (long long)pc.cap, pc.status,
           double(pc.cap - bound) / double(s1));
  }
  fprintf(stderr, "%d configurations, %ld rounds\n", n, total_rounds);
  return 0;
}

// A cases file's cases (bench/cases.json's form): name, heads, q_len, seqlens.
struct FileCase {
  std::string name;
  int heads, q_len;
  std::vector<int32_t> seqlens;
};
std::vector<FileCase> load_cases(const char* path) {
  std::ifstream in(path);
  if (!in) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(1);
  }
  const nlohmann::json file = nlohmann::json::parse(in);
  std::vector<FileCase> cases;
  for (const auto& c : file.at("cases")) {
    cases.push_back({c.at("name").get<std::string>(), c.at("heads").get<int>(), c.at("q_len").get<int>(),
                     c.at("seqlens").get<std::vector<int32_t>>()});
  }
  return cases;
}

int file_cases(const char* path) {
  printf("%-42s %-22s %-22s %-22s\n", "case", "bf16 rounds/cap", "fp8_e4m3", "fp8_e4m3_block");
  for (const FileCase& c : load_cases(path)) {
    const std::vector<int32_t>& seqlens = c.seqlens;
    const int heads = c.heads, q_len = c.q_len, rows = heads * q_len;
    printf("%-42s", c.name.c_str());
    for (const CostModel cost : {sm90_bf16_cost_model(rows), sm90_fp8_cost_model(rows), sm90_fp8_block_cost_model(rows)}) {
      const PlanShape s = shape(int(seqlens.size()), q_len, heads, cost);
      int rounds = 0;
      const PlanCounts pc = plan_measure_with(s, seqlens.data(), RoundCountingProbes{&rounds});
      printf(" %d %s %-16lld", rounds, pc.whole_requests ? "whole" : "cut  ", (long long)pc.cap);
    }
    printf("\n");
  }
  return 0;
}

int time_cases(const char* path) {
  double total = 0;
  for (const FileCase& c : load_cases(path)) {
    const std::vector<int32_t>& seqlens = c.seqlens;
    const int heads = c.heads, q_len = c.q_len;
    const PlanShape s = shape(int(seqlens.size()), q_len, heads, sm90_bf16_cost_model(heads * q_len));
    std::vector<double> us;
    for (int r = 0; r < 31; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const PlanCounts pc = plan_measure(s, seqlens.data());
      std::vector<int32_t> wl(pc.work_list_len), ns(s.batch), fs(s.batch), bo(s.batch), bounds(pc.num_bounds + 1),
          zf(pc.num_zero_fill + 1);
      PlanBuffers buf{wl.data(),     int(wl.size()),     ns.data(), fs.data(),     bo.data(),
                      bounds.data(), int(bounds.size()), zf.data(), int(zf.size()), nullptr};
      if (plan_write(s, seqlens.data(), pc, buf) != kPlanOk) return 1;
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    total += us[us.size() / 2];
    printf("%-42s %8.1f us\n", c.name.c_str(), us[us.size() / 2]);
  }
  printf("%-42s %8.1f us\n", "total", total);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 2 && std::string(argv[1]) == "--cases") return file_cases(argv[2]);
  if (argc > 2 && std::string(argv[1]) == "--time") return time_cases(argv[2]);
  return argc > 1 ? random_cases(atoi(argv[1])) : named_cases();
}
