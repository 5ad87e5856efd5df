// `kbmla plan`: the work-list plan of one batch (or of every case in the cases file)
// beside the fairest static split, in the planner's cost model.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kbmla/decode.hpp"
#include "kbmla/error.hpp"
#include "kbmla/helpers.hpp"
#include "kbmla/planner.hpp"
#include "kbmla/static_baseline.hpp"
#include "src/runtime/plan_impl.hpp"
#include "tools/cases.hpp"
#include "tools/commands.hpp"
#include "tools/slot_work.hpp"

namespace kbmla::tools {

namespace {

struct PlanOptions {
  std::string seqlens_csv;
  std::string case_name;
  std::string cases_path;
  int heads = 16;
  int q_len = 1;
  int sms = 132;
  int cluster = 0;  // 0: sm90 rule (2 above 64 rows)
  bool no_causal = false;
  bool json = false;
  CostModel cost{0, 0, 0};  // the cost flags; zeros: the decode's model's field (cost_with_flags)
  std::string kv_dtype;  // "" (the case's, else bf16), "bf16", "fp8_e4m3" or "fp8_e4m3_block": the cost model
};

struct PolicyReport {
  std::string policy;
  int split_kv = 0;  // static policies: the sweep's best
  CostStats stats;
};

struct PlanReport {
  std::string name;
  PlanShape shape;
  HostPlan plan;
  std::map<int, int> splits_histogram;  // splits -> requests
  double plan_us = 0;
  std::vector<PolicyReport> policies;
  std::string path;  // the work-list call's kernels (describe_decode's summary), or why not
};

// The decode path of the work-list plan, as a call with a bf16 Q on a GPU of `sms` SMs
// would take it (the cache's 32-token part maps assumed present: pages of 64+ tokens).
// Needs no GPU: the plan is made on the host and not uploaded.
std::string decode_path(int heads, int q_len, int d_qk, int page_size, KvDtype kv_dtype, bool causal, int sms,
                        const std::optional<CostModel>& cost, const std::vector<int32_t>& seqlens) {
  try {
    // (The softmax scale does not enter the plan or the kernel choice.)
    const DecodeConfig c{.heads = heads, .q_len = q_len, .d_qk = d_qk, .page_size = page_size, .kv_dtype = kv_dtype,
                         .causal = causal, .softmax_scale = 1.f};
    kbmla::PlanOptions options;
    options.num_ctas = sms;
    options.cost = cost;
    const auto impl = detail::make_host_impl(c, seqlens, options);
    impl->device_sm_count = sms;
    return detail::describe_decode(*impl, QDtype::kBFloat16).summary();
  } catch (const Error& e) {
    return std::string("n/a: ") + e.what();
  }
}

PlanReport make_report(const std::string& name, const PlanShape& shape, const std::vector<int32_t>& seqlens) {
  PlanReport r;
  r.name = name;
  r.shape = shape;
  auto t0 = std::chrono::steady_clock::now();
  r.plan = make_host_plan(shape, seqlens);
  r.plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  for (int32_t s : r.plan.num_splits) r.splits_histogram[s]++;
  r.policies.push_back({"worklist", 0, cost_stats(r.plan.cluster_cost)});
  for (bool persistent : {false, true}) {
    StaticSweepResult sweep = best_static_split(shape, seqlens, persistent);
    r.policies.push_back({persistent ? "static_persistent" : "static", sweep.best_split_kv,
                          cost_stats(sweep.cluster_costs)});
  }
  return r;
}

nlohmann::json to_json(const PlanReport& r) {
  nlohmann::json j;
  j["case"] = r.name;
  j["batch"] = r.shape.batch;
  j["q_len"] = r.shape.q_len;
  j["heads"] = r.shape.heads;
  j["causal"] = r.shape.causal;
  j["tile_rows"] = r.shape.tile_rows;
  j["cluster_size"] = r.shape.cluster_size;
  j["num_ctas"] = r.shape.num_ctas;
  j["whole_requests"] = r.plan.counts.whole_requests;
  j["cost_model"] = {{"per_kv_block", r.shape.cost.per_kv_block},
                     {"per_item", r.shape.cost.per_item},
                     {"per_split", r.shape.cost.per_split}};
  j["work_list_len"] = r.plan.counts.work_list_len;
  j["active_slots"] = r.plan.counts.num_active_clusters;
  j["num_items"] = r.plan.counts.num_items;
  j["num_partial_slots"] = r.plan.counts.num_slots;
  j["workspace_bytes"] = r.plan.workspace_bytes(512);
  j["host_plan_us"] = r.plan_us;
  j["decode_path"] = r.path;
  nlohmann::json hist = nlohmann::json::object();
  for (auto [s, n] : r.splits_histogram) hist[std::to_string(s)] = n;
  j["splits_histogram"] = hist;
  // Per active slot of the work list: the cost model's terms (slot_work.hpp), to fit the
  // model against the bench's measured per-CTA busy intervals.
  nlohmann::json slots = nlohmann::json::array();
  for (const SlotWork& w : slot_work(r.plan)) slots.push_back({w.items, w.blocks, w.split_items});
  j["slots"] = std::move(slots);
  for (const auto& p : r.policies) {
    j["policies"].push_back({{"policy", p.policy},
                             {"split_kv", p.split_kv},
                             {"cost_min", p.stats.min},
                             {"cost_mean", p.stats.mean},
                             {"cost_max", p.stats.max},
                             {"max_over_mean", p.stats.max_over_mean()}});
  }
  return j;
}

void print_report(const PlanReport& r) {
  const auto& c = r.plan.counts;
  fmt::print("{}: batch {}, q_len {}, heads {}, {}; q tile {} rows (cluster {}), {} CTAs = {} cluster slots ({} with "
             "work)\n",
             r.name, r.shape.batch, r.shape.q_len, r.shape.heads, r.shape.causal ? "causal" : "not causal",
             r.shape.tile_rows, r.shape.cluster_size, r.shape.num_ctas, c.num_clusters, c.num_active_clusters);
  fmt::print("work list: {} entries ({} items, at most {} per slot); {} partial slots; workspace {} bytes; "
             "host plan {:.1f} us\n",
             c.work_list_len, c.num_items, c.max_items_per_cluster, c.num_slots, r.plan.workspace_bytes(512),
             r.plan_us);
  std::string hist;
  for (auto [s, n] : r.splits_histogram) hist += fmt::format(" {}x{}", n, s);
  fmt::print("splits per request (requests x splits):{}\n", hist);
  fmt::print("decode path: {}\n", r.path);
  fmt::print("per-slot cost (cost model, ns)    split_kv        min       mean        max   max/mean\n");
  for (const auto& p : r.policies) {
    fmt::print("  {:<30} {:>8} {:>10} {:>10.0f} {:>10} {:>10.3f}\n", p.policy,
               p.split_kv ? std::to_string(p.split_kv) : std::string("varied"), p.stats.min, p.stats.mean,
               p.stats.max, p.stats.max_over_mean());
  }
}

PlanShape shape_for(int batch, int q_len, int heads, KvDtype kv_dtype, const PlanOptions& o) {
  PlanShape s;
  s.batch = batch;
  s.q_len = q_len;
  s.heads = heads;
  s.causal = !o.no_causal;
  s.cluster_size = o.cluster > 0 ? o.cluster : sm90_cluster_size(heads, q_len);
  s.tile_rows = kSm90RowsPerCta * s.cluster_size;
  s.num_ctas = o.sms;
  // The decode's own model (by cache dtype and rows), each field the cost flags give
  // replaced, as kbmla bench does.
  s.cost = cost_with_flags(sm90_cost_model(kv_dtype, heads, q_len), o.cost);
  return s;
}

int run_plan(const PlanOptions& o) {
  require(o.seqlens_csv.empty() != o.case_name.empty(), "plan: give exactly one of --seqlens or --case");
  std::vector<PlanReport> reports;
  if (!o.seqlens_csv.empty()) {
    std::vector<int32_t> seqlens = parse_seqlens_csv(o.seqlens_csv);
    const KvDtype kv_dtype = o.kv_dtype.empty() ? KvDtype::kBFloat16 : kv_dtype_from_name(o.kv_dtype, "--kv-dtype");
    reports.push_back(make_report("seqlens", shape_for(int(seqlens.size()), o.q_len, o.heads, kv_dtype, o), seqlens));
    reports.back().path =
        decode_path(o.heads, o.q_len, 576, 64, kv_dtype, !o.no_causal, o.sms, reports.back().shape.cost, seqlens);
  } else {
    std::vector<BenchCase> cases = load_cases(o.cases_path.empty() ? default_cases_path() : o.cases_path);
    for (const auto& c : cases) {
      if (o.case_name != "all" && c.name != o.case_name) continue;
      std::vector<int32_t> seqlens(c.seqlens.begin(), c.seqlens.end());
      const KvDtype kv_dtype = o.kv_dtype.empty() ? c.kv_dtype : kv_dtype_from_name(o.kv_dtype, "--kv-dtype");
      reports.push_back(make_report(c.name, shape_for(c.batch, c.q_len, c.heads, kv_dtype, o), seqlens));
      reports.back().path = decode_path(c.heads, c.q_len, c.d_qk, c.page_size, kv_dtype, !o.no_causal, o.sms,
                                        reports.back().shape.cost, seqlens);
    }
    if (reports.empty()) find_case(cases, o.case_name);  // throws with the list of names
  }
  if (o.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& r : reports) j.push_back(to_json(r));
    fmt::print("{}\n", (reports.size() == 1 ? j[0] : j).dump(1));
    return 0;
  }
  for (size_t i = 0; i < reports.size(); ++i) {
    if (i) fmt::print("\n");
    print_report(reports[i]);
  }
  return 0;
}

}  // namespace

Action add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan", "Plan one batch and compare per-CTA cost with static splits");
  cmd->add_option("--seqlens", o->seqlens_csv, "Comma-separated KV lengths, one per request");
  cmd->add_option("--case", o->case_name, "A case of the cases file, or 'all'");
  cmd->add_option("--cases", o->cases_path, "Cases JSON (default: bench/cases.json of the source tree)");
  cmd->add_option("--heads", o->heads, "Query heads per token (with --seqlens)")->check(CLI::Range(1, 128));
  cmd->add_option("--q-len", o->q_len, "Query tokens per request (with --seqlens)")->check(CLI::Range(1, 1024));
  cmd->add_option("--sms", o->sms, "CTA budget (the SMs the decode may use)")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--cluster", o->cluster, "CTAs per cluster (default: 2 above 64 rows, else 1)")
      ->check(CLI::Range(1, 16));
  cmd->add_flag("--no-causal", o->no_causal, "Every query token sees every key");
  cmd->add_flag("--json", o->json, "Print JSON instead of a table");
  cmd->add_option("--kv-dtype", o->kv_dtype,
                  "Cache dtype, for the decode's cost model (default: the case's, else bf16)")
      ->check(CLI::IsMember({"bf16", "fp8_e4m3", "fp8_e4m3_block"}));
  add_cost_options(cmd, o->cost);
  return [o] { return run_plan(*o); };
}

}  // namespace kbmla::tools
