// `kbmla demo` (the main job) and `kbmla check`. Both build a random bf16 paged cache in
// random page order with NaN in every unused page and tail, plan the batch, run the split
// emulation of the work-list plan against the float64 reference, and, where an sm_90 GPU
// is present, the decode kernel (outputs NaN-poisoned) against the same reference. The
// demo uses a small Kimi-K3-shaped batch (16 heads, q_len 4, ragged seqlens around page
// boundaries); check takes any shape, seqlens and policy. Exit 1 if a check fails.
#include <string>
#include <vector>

#include <fmt/format.h>

#include <cuda_runtime.h>

#include "kbmla/decode.hpp"
#include "kbmla/device.hpp"
#include "kbmla/planner.hpp"
#include "kbmla/static_baseline.hpp"
#include "reference/random_problem.hpp"
#include "reference/reference.hpp"
#include "kbmla/error.hpp"
#include "tools/cases.hpp"
#include "tools/commands.hpp"

namespace kbmla::tools {

namespace {

struct CheckOptions {
  int heads = 16;
  int q_len = 4;
  int sms = 0;  // 0: every SM of the GPU (132 for the CPU emulation)
  uint64_t seed = 2026;
  std::string seqlens_csv;
  std::string policy = "worklist";
  bool no_causal = false;
  double scale = 0;  // 0: 1 / sqrt(192), Kimi K3
  int d_qk = 576;
  int invariant_blocks = 0;  // > 0: batch-invariant work list (splits every this many blocks)
};

Policy parse_policy(const std::string& n) {
  if (n == "worklist") return Policy::kWorkList;
  if (n == "static") return Policy::kStatic;
  if (n == "static_persistent") return Policy::kStaticPersistent;
  throw Error(detail::concat("--policy '", n, "' is not one of worklist, static, static_persistent"));
}

void cuda_check(cudaError_t e, const char* what) { require(e == cudaSuccess, what, ": ", cudaGetErrorString(e)); }

template <class T>
T* upload(const std::vector<T>& host) {
  T* dev = nullptr;
  cuda_check(cudaMalloc(&dev, std::max<size_t>(host.size(), 1) * sizeof(T)), "cudaMalloc");
  cuda_check(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  return dev;
}

// The decode kernel on the demo batch, outputs NaN-poisoned first, against the reference.
bool run_gpu_check(const DecodeConfig& config, const ref::Problem& problem, const ref::RandomProblem<ref::Bf16>& data,
                   const std::vector<int32_t>& seqlens, const ref::Outputs& expected, const PlanOptions& options) {
  DevicePlan plan = DevicePlan::create(config, seqlens, options);
  const size_t rows = size_t(problem.batch) * problem.q_len * problem.heads;
  ref::Bf16* q = upload(data.q);
  ref::Bf16* cache = upload(data.cache);
  int32_t* block_table = upload(data.block_table);
  int32_t* dev_seqlens = upload(data.seqlens);
  void *out = nullptr, *ws = nullptr;
  float* lse = nullptr;
  cuda_check(cudaMalloc(&out, rows * 512 * 2), "cudaMalloc");
  cuda_check(cudaMalloc(&lse, rows * 4), "cudaMalloc");
  cuda_check(cudaMalloc(&ws, plan.workspace_bytes()), "cudaMalloc");
  cuda_check(cudaMemset(out, 0xff, rows * 512 * 2), "poison");
  cuda_check(cudaMemset(lse, 0xff, rows * 4), "poison");
  init_workspace(ws, plan.workspace_bytes(), nullptr);
  KvCache kv(cache, problem.num_pages, problem.page_size, problem.d_qk);
  DecodeArgs args;
  args.q = q;
  args.block_table = block_table;
  args.max_pages = problem.max_pages;
  args.seqlens = dev_seqlens;
  args.out = out;
  args.lse = lse;
  args.workspace = ws;
  args.workspace_bytes = plan.workspace_bytes();
  args.debug_sync = true;
  decode(plan, kv, args);
  std::vector<ref::Bf16> got_out(rows * 512);
  std::vector<float> got_lse(rows);
  cuda_check(cudaMemcpy(got_out.data(), out, got_out.size() * 2, cudaMemcpyDeviceToHost), "download");
  cuda_check(cudaMemcpy(got_lse.data(), lse, got_lse.size() * 4, cudaMemcpyDeviceToHost), "download");
  for (void* p : {static_cast<void*>(q), static_cast<void*>(cache), static_cast<void*>(block_table),
                  static_cast<void*>(dev_seqlens), out, static_cast<void*>(lse), ws}) {
    cudaFree(p);
  }
  std::vector<double> o(got_out.size()), l(got_lse.begin(), got_lse.end());
  for (size_t i = 0; i < o.size(); ++i) o[i] = ref::bf16_to_float(got_out[i]);
  ref::Comparison cmp = ref::compare(problem, expected, o, l);
  const bool ok = !cmp.any_nan && !cmp.infinite_lse_mismatch && cmp.rel_frobenius < 1e-2 && cmp.worst_row_rel < 3e-2 &&
                  cmp.lse_max_abs < 1e-3;
  fmt::print("GPU decode ({}, {} CTAs, {} work items) vs float64 reference: rel error {:.2e}, worst row {:.2e}, "
             "lse abs {:.2e} -> {}\n",
             policy_name(plan.options().policy), plan.options().num_ctas, plan.host_plan().counts.num_items,
             cmp.rel_frobenius, cmp.worst_row_rel, cmp.lse_max_abs, ok ? "PASS" : "FAIL");
  return ok;
}

// `emulation_ctas`: the CTA budgets whose work-list plans are emulated on the CPU.
int run_check(const CheckOptions& o, const std::vector<int32_t>& seqlens, const std::vector<int>& emulation_ctas,
              const char* label) {
  require(!seqlens.empty(), label, ": no seqlens given");
  const Policy policy = parse_policy(o.policy);
  DeviceInfo dev = query_device();
  if (dev.present) {
    fmt::print("GPU: {} (compute capability {}.{}, {} SMs){}\n", dev.name, dev.cc.major, dev.cc.minor,
               dev.sm_count, dev.supported ? "" : " - not supported: " + dev.reason);
  } else {
    fmt::print("No usable GPU ({}): running plan + split emulation on the CPU.\n", dev.reason);
  }
  ref::Problem problem;
  problem.batch = int(seqlens.size());
  problem.q_len = o.q_len;
  problem.heads = o.heads;
  problem.causal = !o.no_causal;
  problem.scale = o.scale > 0 ? o.scale : 1.0 / std::sqrt(192.0);
  problem.page_size = 64;
  problem.d_qk = o.d_qk;
  auto data = ref::make_random_problem<ref::Bf16>(problem, seqlens, o.seed);
  problem = data.problem;

  DecodeConfig config;
  config.heads = problem.heads;
  config.q_len = problem.q_len;
  config.causal = problem.causal;
  config.d_qk = problem.d_qk;
  config.softmax_scale = float(problem.scale);
  PlanOptions plan_options;
  plan_options.batch_invariant_split_blocks = o.invariant_blocks;
  PlanShape shape = decode_plan_shape(config, problem.batch, plan_options);

  fmt::print("batch {}: heads {}, q_len {}, d_qk {}, {}{}, seqlens", problem.batch, problem.heads, problem.q_len,
             problem.d_qk, problem.causal ? "causal" : "not causal",
             o.invariant_blocks > 0 ? fmt::format(", batch-invariant splits of {} blocks", o.invariant_blocks) : "");
  for (size_t i = 0; i < seqlens.size() && i < 16; ++i) fmt::print(" {}", seqlens[i]);
  fmt::print("{}; bf16 paged cache, page 64, random page order, unused pages NaN\n", seqlens.size() > 16 ? " ..." : "");

  ref::Outputs expected = ref::reference_decode(problem, data.inputs());
  bool all_ok = true;
  for (int ctas : emulation_ctas) {
    shape.num_ctas = ctas;
    HostPlan plan = make_host_plan(shape, seqlens);
    ref::Outputs got = ref::emulate_split_decode(problem, data.inputs(), plan);
    ref::Comparison cmp = ref::compare(problem, expected, got.out, got.lse);
    const bool ok = !cmp.any_nan && !cmp.infinite_lse_mismatch && cmp.rel_frobenius <= 1e-12 &&
                    cmp.worst_row_rel <= 1e-12 && cmp.lse_max_abs <= 1e-12;
    all_ok = all_ok && ok;
    CostStats wl = cost_stats(plan.cluster_cost);
    fmt::print("{:>3} CTAs: {} work items, {} partial slots, per-CTA cost max/mean {:.3f}; split emulation vs "
               "float64 reference: rel error {:.2e}, worst row {:.2e}, lse abs {:.2e} -> {}\n",
               ctas, plan.counts.num_items, plan.counts.num_slots, wl.max_over_mean(), cmp.rel_frobenius,
               cmp.worst_row_rel, cmp.lse_max_abs, ok ? "PASS" : "FAIL");
  }
  if (dev.supported) {
    PlanOptions options;
    options.policy = policy;
    options.num_ctas = o.sms;
    options.batch_invariant_split_blocks = o.invariant_blocks;
    all_ok = run_gpu_check(config, problem, data, seqlens, expected, options) && all_ok;
  }
  fmt::print("{}: {}\n", label, all_ok ? "PASS" : "FAIL");
  return all_ok ? 0 : 1;
}

}  // namespace

Action add_demo_command(CLI::App& app) {
  auto o = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand("demo", "Plan a Kimi-K3-shaped batch and check it against the reference");
  cmd->add_option("--heads", o->heads, "Query heads")->check(CLI::Range(1, 128));
  cmd->add_option("--q-len", o->q_len, "Query tokens per request")->check(CLI::Range(1, 16));
  cmd->add_option("--sms", o->sms, "CTA budget (0: every SM)")->check(CLI::Range(0, 4096));
  cmd->add_option("--seed", o->seed, "Random seed");
  return [o] {
    const std::vector<int32_t> seqlens = {0, 1, 3, 63, 64, 65, 127, 700, 2049, 5000, 300, 12};
    return run_check(*o, seqlens, {o->sms > 0 ? o->sms : 132, 7}, "demo");
  };
}

Action add_check_command(CLI::App& app) {
  auto o = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check", "Check one batch shape against the float64 reference (GPU decode where present, else emulation)");
  cmd->add_option("--seqlens", o->seqlens_csv, "Comma-separated KV lengths, one per request")->required();
  cmd->add_option("--heads", o->heads, "Query heads")->check(CLI::Range(1, 128));
  cmd->add_option("--q-len", o->q_len, "Query tokens per request")->check(CLI::Range(1, 16));
  cmd->add_option("--policy", o->policy, "worklist, static or static_persistent (GPU decode)");
  cmd->add_option("--sms", o->sms, "CTA budget (0: every SM; 132 for the emulation)")->check(CLI::Range(0, 4096));
  cmd->add_option("--scale", o->scale, "Softmax scale (default 1/sqrt(192))")->check(CLI::PositiveNumber);
  cmd->add_flag("--no-causal", o->no_causal, "Every query token sees every key");
  cmd->add_option("--d-qk", o->d_qk, "Query/key width: 576 (latent + rope) or 512 (no rope)")
      ->check(CLI::IsMember({576, 512}));
  cmd->add_option("--batch-invariant", o->invariant_blocks,
                  "Batch-invariant work list: split every N KV blocks (0: balanced)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--seed", o->seed, "Random seed");
  return [o] {
    return run_check(*o, parse_seqlens_csv(o->seqlens_csv), {o->sms > 0 ? o->sms : 132}, "check");
  };
}

}  // namespace kbmla::tools
