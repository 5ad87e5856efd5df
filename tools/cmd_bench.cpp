// `kbmla bench`: in one process, the device-to-device copy ceiling (2 GiB, bytes read +
// written), then every case of the cases file under each policy: decode + combine time
// of one layer (median of CUDA-event-timed runs after warm-up, no cache rotation, as the
// reference figures were measured), with a rotated-cache figure where the case's bytes
// are under 4x L2. The static policies use the fastest split count of a measured sweep.
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kbmla/decode.hpp"
#include "kbmla/device.hpp"
#include "kbmla/error.hpp"
#include "src/runtime/decode_internal.hpp"
#include "src/sm90/decode/config.hpp"
#include "src/sm90/decode/kernel.hpp"
#include "tools/balance_records.hpp"
#include "tools/balance_svg.hpp"
#include "tools/bench_timing.hpp"
#include "tools/cases.hpp"
#include "tools/clock_probe.hpp"
#include "tools/commands.hpp"
#include "tools/graph_ab.hpp"
#include "tools/item_phases.hpp"
#include "tools/page_order.hpp"
#include "tools/slot_work.hpp"

#ifndef KBMLA_GIT_COMMIT
#define KBMLA_GIT_COMMIT "unknown"
#endif

namespace kbmla::tools {

namespace {

struct BenchOptions {
  std::string cases_path;
  std::string case_filter;
  std::string policies = "worklist,static,static_persistent";
  std::string json_path;
  std::string svg_dir;
  std::string commit = KBMLA_GIT_COMMIT;
  int runs = 50;
  int warmup = 10;
  int heat_ms = 0;  // run each timed call back to back this long first: the power-capped steady state
  int cool_ms = 1000;  // idle this long before each case's timed measurement (NOTES v49)
  int sms = 0;
  int page_size = 0;  // 0: each case's own
  int page_runs = 1;  // physically consecutive pages per run of the random placement
  std::string kv_dtype;  // empty: each case's own
  std::string q_dtype = "bf16";  // fp8_e4m3: the caller's e4m3 Q (fp8 caches), no quantiser
  bool spike = false;
  bool balance = false;
  bool device_plan = false;
  bool graph = false;
  int graph_ab_rounds = 0;  // --graph-ab: alternated eager / graph rounds (graph_ab.hpp)
  int invariant_blocks = 0;
  CostModel cost{0, 0, 0};  // zeros: the decode's default model
};

// Scale of the benchmark's fp8 caches: random values in [-1, 1) stored as e4m3(value / scale).
constexpr float kBenchKvScale = 1.f / 256.f;
// Scale of the benchmark's e4m3 Q (--q-dtype fp8_e4m3): random values in [-1, 1) as e4m3(value / scale).
constexpr float kBenchQScale = 1.f / 256.f;

struct CaseData {
  std::vector<int32_t> seqlens;
  int max_pages = 1;
  int64_t num_pages = 1;
  size_t cache_bytes = 0;
  std::vector<std::unique_ptr<DeviceBuffer>> caches;  // rotated copies (1 = no rotation)
  std::unique_ptr<DeviceBuffer> q, out, lse, block_table, seqlens_dev, kv_scale, q_scale;
};

struct Measurement {
  std::string policy;
  int split_kv = 0;
  double median_us = 0, rotated_us = 0, plan_us = 0, host_us = 0;
  double graph_us = 0;  // --graph: the same call captured in a CUDA graph, replays timed like a run
  std::vector<GraphAbRound> graph_ab;  // --graph-ab
  bool output_finite = false;
  // --balance: each CTA's busy interval, their max / mean, and for plans with a combine its
  // blocks' spans after the decode's last CTA ended (balance_records.hpp).
  BalanceSummary balance;
  // --balance, work-list plans: the planned work of each interval's slot (slot_work.hpp),
  // {items, blocks, split items}, for fitting the cost model (bench/fit_costs.py).
  std::vector<std::array<int64_t, 3>> cta_work;
  ItemPhases item_phases;                        // --balance: per-item phases (item_phases.hpp)
  tools::ClockSummary clock, graph_clock;        // SM clock during the timed runs (clock_probe.hpp)
  std::optional<DecodePath> path;                // the full-mode call's kernels and operand types
  // Early merges' waits that gave up and waited for the whole decode, over every call of
  // the measurement (work_format.hpp, CombineSync; 0 when they all found their flags).
  uint32_t combine_fallbacks = 0;
};

// The early merges' fallback count of a workspace (work_format.hpp, CombineSync).
uint32_t combine_fallbacks(const void* ws) {
  CombineSync sync{};
  cuda_check(cudaMemcpy(&sync, static_cast<const uint8_t*>(ws) + kCombineSyncOffset, sizeof sync,
                        cudaMemcpyDeviceToHost),
             "copy");
  return sync.fallbacks;
}

int run_bench(const BenchOptions& o) {
  DeviceInfo dev = query_device();
  require(dev.supported, "bench needs an sm_90 GPU: ", dev.reason);
  cudaStream_t stream;
  cuda_check(cudaStreamCreate(&stream), "stream");
  // 0 lets the library choose: every SM, or for 2-CTA clusters every SM the device can
  // co-schedule in clusters.
  const int sms = o.sms;
  const int pair_clusters = sm90::max_active_clusters(2);
  int cuda_device = 0;
  cuda_check(cudaGetDevice(&cuda_device), "cudaGetDevice");
  tools::ClockProbe probe(cuda_device);
  probe.start();
  const double copy_gbps = measure_copy_gbps(stream);
  const tools::ClockSummary copy_clock = probe.stop();
  // The floor of every timed run: an event pair around one empty kernel, timed like a run.
  const double empty_launch_us = median_us([&](int) { launch_empty_kernel(stream); }, 200, 20, stream);
  fmt::print("GPU {} ({} SMs, {} co-resident 2-CTA clusters, L2 {} MiB); copy ceiling {:.0f} GB/s (2 GiB "
             "device-to-device, read + write); an empty kernel times {:.1f} us\n",
             dev.name, dev.sm_count, pair_clusters, dev.l2_bytes >> 20, copy_gbps, empty_launch_us);
  fmt::print("SM clock during the copy: {}{}\n", copy_clock.describe(),
             probe.available() ? "" : fmt::format(" (no NVML: {})", probe.unavailable_reason()));

  std::vector<BenchCase> cases = load_cases(o.cases_path.empty() ? default_cases_path() : o.cases_path);
  std::vector<std::string> policies;
  for (size_t pos = 0; pos <= o.policies.size();) {
    size_t c = o.policies.find(',', pos);
    policies.push_back(o.policies.substr(pos, c == std::string::npos ? std::string::npos : c - pos));
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  auto policy_of = [](const std::string& n) {
    if (n == "worklist") return Policy::kWorkList;
    if (n == "static") return Policy::kStatic;
    if (n == "static_persistent") return Policy::kStaticPersistent;
    throw Error(detail::concat("bench: unknown policy '", n, "' (worklist, static, static_persistent)"));
  };
  for (const auto& n : policies) policy_of(n);

  nlohmann::json results = nlohmann::json::array();
  fmt::print("{:<36} {:<18} {:>5} {:>10} {:>8} {:>8} {:>8} {:>7} {:>8} {:>10} {:>8}{}\n", "case", "policy", "split",
             "median_us", "plan_us", "host_us", "GB/s", "%copy", "TFLOP/s", "rotated%", "ref%",
             o.balance ? "  busy max/mean (max us)  combine us after the decode's last CTA" : "");
  int matched = 0;
  for (const BenchCase& bc : cases) {
    if (!o.case_filter.empty() && o.case_filter != "all" && bc.name.find(o.case_filter) == std::string::npos) continue;
    ++matched;
    CaseData d;
    d.seqlens.assign(bc.seqlens.begin(), bc.seqlens.end());
    int64_t tokens = 0;
    const int page_size = o.page_size > 0 ? o.page_size : bc.page_size;
    const KvDtype kv_dtype = o.kv_dtype.empty() ? bc.kv_dtype : kv_dtype_from_name(o.kv_dtype, "--kv-dtype");
    if (kv_dtype == KvDtype::kFp8E4m3PerBlock && bc.d_qk != 576) {
      fmt::print("{:<36} skipped: the per-block fp8 cache has d_qk 576 (the case has {})\n", bc.name, bc.d_qk);
      continue;
    }
    const bool fp8 = kv_dtype == KvDtype::kFp8E4m3;
    const bool per_block = kv_dtype == KvDtype::kFp8E4m3PerBlock;
    const bool q_e4m3 = o.q_dtype == "fp8_e4m3";
    if (q_e4m3 && kv_dtype == KvDtype::kBFloat16) {
      fmt::print("{:<36} skipped: --q-dtype fp8_e4m3 needs an fp8 cache (the case's is bf16)\n", bc.name);
      continue;
    }
    const int token_bytes = kv_token_bytes(kv_dtype, bc.d_qk);  // of the cache; Q and out stay bf16
    std::vector<int32_t> pages_per(bc.batch);
    for (int b = 0; b < bc.batch; ++b) {
      pages_per[b] = (d.seqlens[b] + page_size - 1) / page_size;
      d.max_pages = std::max(d.max_pages, pages_per[b]);
      d.num_pages += pages_per[b];
      tokens += d.seqlens[b];
    }
    // Random page order over the whole cache, in runs of --page-runs physically consecutive
    // pages (a request's consecutive pages take a run in order).
    const std::vector<int32_t> perm = random_page_order(d.num_pages, o.page_runs, 7);
    std::vector<int32_t> table(size_t(bc.batch) * d.max_pages, 0);
    size_t next = 0;
    for (int b = 0; b < bc.batch; ++b)
      for (int j = 0; j < pages_per[b]; ++j) table[size_t(b) * d.max_pages + j] = perm[next++];
    d.cache_bytes = size_t(d.num_pages) * page_size * token_bytes;
    const size_t rows = size_t(bc.batch) * bc.q_len * bc.heads;
    const double kv_bytes = double(tokens) * token_bytes;
    // (An e4m3 Q for the per-block cache: 512 e4m3 and 64 bf16 a row.)
    const double q_row_bytes = !q_e4m3 ? 2.0 * bc.d_qk : per_block ? 512 + 2 * 64 : bc.d_qk;
    const double io_bytes = kv_bytes + double(rows) * q_row_bytes + double(rows) * 512 * 2;
    const int copies = kv_bytes < 4.0 * double(dev.l2_bytes)
                           ? int(std::min<double>(32, std::ceil(4.0 * double(dev.l2_bytes) / std::max(kv_bytes, 1.0)) + 1))
                           : 1;
    for (int c = 0; c < copies; ++c) {
      d.caches.push_back(std::make_unique<DeviceBuffer>(d.cache_bytes));
      if (kv_dtype == KvDtype::kFp8E4m3PerBlock) {
        fill_device_random_fp8_block(d.caches.back()->ptr, d.cache_bytes / token_bytes, 100 + c, stream);
      } else if (fp8) {
        fill_device_random_e4m3(d.caches.back()->ptr, d.cache_bytes, kBenchKvScale, 100 + c, stream);
      } else {
        fill_device_random_bf16(d.caches.back()->ptr, d.cache_bytes / 2, 100 + c, stream);
      }
    }
    d.q = std::make_unique<DeviceBuffer>(rows * bc.d_qk * 2);
    if (q_e4m3 && per_block) {
      // The latent part (rows x 512 e4m3), then the rope part (rows x 64 bf16) as q_pe.
      fill_device_random_e4m3(d.q->ptr, rows * 512, kBenchQScale, 3, stream);
      fill_device_random_bf16(static_cast<uint8_t*>(d.q->ptr) + rows * 512, rows * 64, 4, stream);
    } else if (q_e4m3) {
      fill_device_random_e4m3(d.q->ptr, rows * bc.d_qk, kBenchQScale, 3, stream);
    } else {
      fill_device_random_bf16(d.q->ptr, rows * bc.d_qk, 3, stream);
    }
    d.out = std::make_unique<DeviceBuffer>(rows * 512 * 2);
    d.lse = std::make_unique<DeviceBuffer>(rows * 4);
    d.block_table = std::make_unique<DeviceBuffer>(table.size() * 4);
    d.seqlens_dev = std::make_unique<DeviceBuffer>(d.seqlens.size() * 4);
    cuda_check(cudaMemcpy(d.block_table->ptr, table.data(), table.size() * 4, cudaMemcpyHostToDevice), "copy");
    cuda_check(cudaMemcpy(d.seqlens_dev->ptr, d.seqlens.data(), d.seqlens.size() * 4, cudaMemcpyHostToDevice), "copy");
    std::vector<KvCache> kv;
    for (auto& c : d.caches) {
      kv.emplace_back(c->ptr, d.num_pages, page_size, bc.d_qk, kv_dtype);
    }
    d.kv_scale = std::make_unique<DeviceBuffer>(sizeof(float));
    cuda_check(cudaMemcpy(d.kv_scale->ptr, &kBenchKvScale, sizeof(float), cudaMemcpyHostToDevice), "copy");
    d.q_scale = std::make_unique<DeviceBuffer>(sizeof(float));
    cuda_check(cudaMemcpy(d.q_scale->ptr, &kBenchQScale, sizeof(float), cudaMemcpyHostToDevice), "copy");

    DecodeConfig config;
    config.heads = bc.heads;
    config.q_len = bc.q_len;
    config.d_qk = bc.d_qk;
    config.page_size = page_size;
    config.kv_dtype = kv_dtype;
    config.softmax_scale = 1.0f / std::sqrt(576.0f);

    // The case's buffers as decode arguments, with a fresh (initialised) workspace.
    auto case_args = [&](const DevicePlan& plan, const DeviceBuffer& ws) {
      init_workspace(ws.ptr, plan.workspace_bytes(), stream);
      DecodeArgs a;
      a.q = d.q->ptr;
      a.block_table = static_cast<int32_t*>(d.block_table->ptr);
      a.max_pages = d.max_pages;
      a.seqlens = static_cast<int32_t*>(d.seqlens_dev->ptr);
      a.out = d.out->ptr;
      a.lse = static_cast<float*>(d.lse->ptr);
      a.workspace = ws.ptr;
      a.workspace_bytes = plan.workspace_bytes();
      a.stream = stream;
      if (fp8) a.kv_scale = static_cast<const float*>(d.kv_scale->ptr);
      if (q_e4m3) {
        a.q_dtype = QDtype::kFp8E4m3;
        a.q_scale = static_cast<const float*>(d.q_scale->ptr);
        if (per_block) a.q_pe = static_cast<const uint8_t*>(d.q->ptr) + rows * 512;
      }
      return a;
    };
    // One call (decode + combine, with the quantiser where the call has one) captured in a
    // CUDA graph, its replays timed as the runs are (an idle GPU at each replay's event):
    // what an engine that replays its decode step as a graph pays, without the host's
    // checks and per-launch work between the event and the first kernel.
    auto graph_median_us = [&](const DevicePlan& plan, const KvCache& cache, const DecodeArgs& a,
                               tools::ClockSummary& graph_clock) {
      const GraphExec g{
          capture_call_graph(stream, [&] { detail::decode_with_mode(plan, cache, a, sm90::KernelMode::kFull); })};
      probe.start();
      const double us = median_us([&](int) { cuda_check(cudaGraphLaunch(g.exec, stream), "graph launch"); }, o.runs,
                                  o.warmup, stream);
      graph_clock = probe.stop();
      return us;
    };
    auto measure = [&](Policy policy, int splits, int runs, bool rotated_too,
                       sm90::KernelMode mode = sm90::KernelMode::kFull, int invariant_blocks = 0,
                       bool with_combine = true) {
      Measurement m;
      m.policy = policy_name(policy);
      if (mode == sm90::KernelMode::kLoadOnly) m.policy += "/load_only";
      if (mode == sm90::KernelMode::kMathOnly) m.policy += "/math_only";
      if (!with_combine) m.policy += "/no_combine";
      if (invariant_blocks > 0) m.policy += "/invariant";
      PlanOptions opt;
      opt.policy = policy;
      opt.num_ctas = sms;
      opt.static_splits = splits;
      opt.batch_invariant_split_blocks = invariant_blocks;
      if (o.cost.per_kv_block > 0 || o.cost.per_item > 0 || o.cost.per_split > 0) {
        opt.cost = cost_with_flags(sm90_cost_model(kv_dtype, bc.heads, bc.q_len), o.cost);
      }
      auto t0 = std::chrono::steady_clock::now();
      DevicePlan plan = DevicePlan::create(config, d.seqlens, opt);
      m.plan_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      m.split_kv = plan.options().static_splits;
      if (mode == sm90::KernelMode::kFull) m.path = describe_decode(plan, kv[0], q_e4m3 ? QDtype::kFp8E4m3 : QDtype::kBFloat16);
      DeviceBuffer ws(plan.workspace_bytes());
      const DecodeArgs a = case_args(plan, ws);
      // The previous case's power draw lowers the clock of the next for ~1 s (the 128-head
      // cases leave B1 at 1785 MHz, NOTES v49): each case starts from an idle GPU, the
      // state the copy ceiling was measured in.
      if (o.cool_ms > 0 && rotated_too) std::this_thread::sleep_for(std::chrono::milliseconds(o.cool_ms));
      if (o.heat_ms > 0 && rotated_too) {
        // Synchronised calls, as the timed runs are, until the power controller has settled
        // (the clock falls within ~0.2 s of sustained load and settles in ~1 s, NOTES v35).
        const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(o.heat_ms);
        while (std::chrono::steady_clock::now() < until) {
          detail::decode_with_mode(plan, kv[0], a, mode, with_combine);
          cuda_check(cudaStreamSynchronize(stream), "sync");
        }
      }
      probe.start();
      m.median_us =
          median_us([&](int) { detail::decode_with_mode(plan, kv[0], a, mode, with_combine); }, runs, o.warmup, stream);
      m.clock = probe.stop();
      {
        // Host time of one decode call (checks, Q tensor map, the launches), which the
        // event-timed median includes: the GPU is idle when each timed run is enqueued.
        // Each call is synchronised like a timed run: 100 calls queued back to back kept the
        // GPU busy for ~40 ms and the policies timed after them ran 4-7 % slower.
        constexpr int kHostRuns = 20;
        double total = 0;
        for (int i = 0; i < kHostRuns; ++i) {
          const auto h0 = std::chrono::steady_clock::now();
          detail::decode_with_mode(plan, kv[0], a, mode);
          total += std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - h0).count();
          cuda_check(cudaStreamSynchronize(stream), "sync");
        }
        m.host_us = total / kHostRuns;
      }
      // (The work list's timed measurement only: not the static sweep's or the warm-up pass.)
      // From an idle GPU as the eager runs: right after them and the host-time calls, the
      // 96- and 128-head calls replayed 3-8 % slower than eager in every v50-v52 suite, and
      // 0.4-5 % faster than eager when each was timed after the idle wait (--graph-ab, NOTES v55).
      if (o.graph && policy == Policy::kWorkList && rotated_too && mode == sm90::KernelMode::kFull && with_combine) {
        if (o.cool_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.cool_ms));
        m.graph_us = graph_median_us(plan, kv[0], a, m.graph_clock);
      }
      if (o.graph_ab_rounds > 0 && policy == Policy::kWorkList && rotated_too && mode == sm90::KernelMode::kFull &&
          with_combine) {
        m.graph_ab = run_graph_ab(
            o.graph_ab_rounds, o.runs, o.warmup, o.cool_ms, stream,
            [&](bool combine) { detail::decode_with_mode(plan, kv[0], a, sm90::KernelMode::kFull, combine); }, probe);
      }
      if (rotated_too && kv.size() > 1) {
        m.rotated_us = median_us([&](int i) { detail::decode_with_mode(plan, kv[size_t(i) % kv.size()], a, mode); },
                                 runs, o.warmup, stream);
      }
      if (o.balance && mode == sm90::KernelMode::kFull) {
        const int ctas = timeline_ctas(plan);
        DeviceBuffer tl(size_t(ctas) * 32);
        cuda_check(cudaMemset(tl.ptr, 0, size_t(ctas) * 32), "memset");
        DecodeArgs b = a;
        b.timeline = static_cast<unsigned long long*>(tl.ptr);
        const size_t item_bytes = size_t(ctas) * kTimelineItems * kItemPhaseSlots * 8;
        DeviceBuffer itl(item_bytes);
        cuda_check(cudaMemset(itl.ptr, 0, item_bytes), "memset");
        b.item_timeline = static_cast<unsigned long long*>(itl.ptr);
        const int combine_blocks = combine_timeline_blocks(plan);
        DeviceBuffer ctl(size_t(std::max(combine_blocks, 1)) * 16);
        cuda_check(cudaMemset(ctl.ptr, 0, size_t(std::max(combine_blocks, 1)) * 16), "memset");
        if (combine_blocks > 0) b.combine_timeline = static_cast<unsigned long long*>(ctl.ptr);
        detail::decode_with_mode(plan, kv[0], b, mode);
        std::vector<unsigned long long> rec(size_t(ctas) * 4), item_rec(item_bytes / 8);
        cuda_check(cudaMemcpy(rec.data(), tl.ptr, rec.size() * 8, cudaMemcpyDeviceToHost), "copy");
        cuda_check(cudaMemcpy(item_rec.data(), itl.ptr, item_bytes, cudaMemcpyDeviceToHost), "copy");
        m.item_phases = summarize_item_phases(rec, item_rec, ctas);
        std::vector<unsigned long long> crec(size_t(std::max(combine_blocks, 0)) * 2);
        if (combine_blocks > 0) cuda_check(cudaMemcpy(crec.data(), ctl.ptr, crec.size() * 8, cudaMemcpyDeviceToHost), "copy");
        m.balance = summarize_balance(rec, ctas, crec, combine_blocks);
        if (policy == Policy::kWorkList) {
          const HostPlan& h = plan.host_plan();
          const std::vector<SlotWork> work = slot_work(h);
          for (int c : m.balance.interval_cta) {
            const size_t g = size_t(c / h.shape.cluster_size);  // a cluster's CTAs share its slot
            // (A CTA past the plan's slots would be a timeline bug: no zero terms for the fit.)
            require(g < work.size(), "bench: ", bc.name, ": CTA ", c, " recorded work, the plan has ", work.size(),
                    " slots");
            const SlotWork& w = work[g];
            m.cta_work.push_back({w.items, w.blocks, w.split_items});
          }
        }
      }
      const uint32_t errors = read_device_errors(ws.ptr, stream);
      require(errors == 0, "bench: ", bc.name, ": device reported: ", describe_device_errors(errors));
      m.combine_fallbacks = combine_fallbacks(ws.ptr);
      std::vector<float> lse(rows);
      cuda_check(cudaMemcpy(lse.data(), d.lse->ptr, rows * 4, cudaMemcpyDeviceToHost), "copy");
      m.output_finite = std::all_of(lse.begin(), lse.end(), [](float x) { return !std::isnan(x); });
      return m;
    };

    std::vector<std::pair<std::string, sm90::KernelMode>> runs_to_do;
    for (const std::string& pname : policies) runs_to_do.push_back({pname, sm90::KernelMode::kFull});
    // The spike modes exist for the bf16 kernel, d_qk 576, pages loaded by TMA.
    if (o.spike && bc.d_qk == 576 && kv_dtype == KvDtype::kBFloat16 && page_size >= sm90::kGatherBelowPage) {
      runs_to_do.push_back({"worklist", sm90::KernelMode::kLoadOnly});
      runs_to_do.push_back({"worklist", sm90::KernelMode::kMathOnly});
    }
    // Every kernel: the full decode without the combine (issue 4 item 3's bound).
    if (o.spike) runs_to_do.push_back({"worklist/no_combine", sm90::KernelMode::kFull});
    if (o.device_plan) runs_to_do.push_back({"worklist/device_plan", sm90::KernelMode::kFull});
    if (o.invariant_blocks > 0) runs_to_do.push_back({"worklist/invariant", sm90::KernelMode::kFull});
    // An untimed pass first: right after the cache is written the first policy timed ran
    // ~7 us slower than the same plan timed later (measured 2026-11-29; L2 write-back of the
    // freshly filled cache), which biased whichever policy came first.
    measure(Policy::kWorkList, 0, 50, false);
    // Device planning: replan (one CTA, GPU-timed) then decode + combine on the fixed grid.
    auto measure_device_plan = [&]() {
      Measurement m;
      m.policy = "worklist/device_plan";
      PlanOptions opt;
      opt.num_ctas = sms;
      DevicePlan plan = DevicePlan::create_device_planned(config, bc.batch, opt);
      DeviceBuffer ws(plan.workspace_bytes());
      const DecodeArgs a = case_args(plan, ws);
      m.plan_us = median_us([&](int) { plan.replan(a.seqlens, stream); }, o.runs, o.warmup, stream);
      m.median_us = median_us([&](int) { decode(plan, kv[0], a); }, o.runs, o.warmup, stream);
      const uint32_t errors = read_device_errors(ws.ptr, stream);
      require(errors == 0, "bench: ", bc.name, ": device reported: ", describe_device_errors(errors));
      m.combine_fallbacks = combine_fallbacks(ws.ptr);
      m.output_finite = true;
      return m;
    };
    std::vector<Measurement> for_svg;
    for (const auto& [pname, mode] : runs_to_do) {
      const bool device_plan = pname == "worklist/device_plan";
      const bool invariant = pname == "worklist/invariant";
      const bool no_combine = pname == "worklist/no_combine";
      const Policy policy = device_plan || invariant || no_combine ? Policy::kWorkList : policy_of(pname);
      Measurement best;
      if (device_plan) {
        best = measure_device_plan();
      } else if (invariant) {
        best = measure(policy, 0, o.runs, false, mode, o.invariant_blocks);
      } else if (no_combine) {
        best = measure(policy, 0, o.runs, false, mode, 0, /*with_combine=*/false);
      } else if (policy == Policy::kWorkList) {
        best = measure(policy, 0, o.runs, mode == sm90::KernelMode::kFull, mode);
      } else {
        // Measured sweep of uniform split counts; the fastest is the baseline.
        double best_us = 1e30;
        int best_s = 1;
        for (int s : {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128}) {
          int max_blocks = 0;
          for (int32_t L : d.seqlens) max_blocks = std::max(max_blocks, (L + 63) / 64);
          if (s > std::max(1, max_blocks)) break;
          Measurement m = measure(policy, s, 10, false);
          if (m.median_us < best_us) {
            best_us = m.median_us;
            best_s = s;
          }
        }
        best = measure(policy, best_s, o.runs, true);
      }
      const double gbps = io_bytes / (best.median_us * 1e3);
      const double pct = 100.0 * gbps / copy_gbps;
      const double tflops = 2.0 * bc.q_len * bc.heads * double(tokens) * (bc.d_qk + 512) / (best.median_us * 1e6);
      const double rot_pct = best.rotated_us > 0 ? 100.0 * io_bytes / (best.rotated_us * 1e3) / copy_gbps : 0;
      const BalanceSummary& bal = best.balance;
      fmt::print("{:<36} {:<18} {:>5} {:>10.1f} {:>8.0f} {:>8.1f} {:>8.0f} {:>7.1f} {:>8.0f} {:>10} {:>8}{}\n", bc.name,
                 best.policy, best.split_kv ? std::to_string(best.split_kv) : "-", best.median_us, best.plan_us,
                 best.host_us, gbps,
                 pct, tflops, best.rotated_us > 0 ? fmt::format("{:.1f}", rot_pct) : "-",
                 bc.reference_pct_of_copy ? fmt::format("{:.1f}", *bc.reference_pct_of_copy) : "-",
                 (bal.busy_max_over_mean > 0 ? fmt::format("  {:.3f} ({:.1f})", bal.busy_max_over_mean, bal.busy_max_us)
                                             : std::string()) +
                     (best.graph_us > 0 ? fmt::format("  graph {:.1f}", best.graph_us) : std::string()) +
                     (bal.combine_end_us >= 0
                          ? fmt::format("  combine +{:.1f}..+{:.1f}", bal.combine_start_us, bal.combine_end_us)
                          : std::string()) +
                     format_item_phases(best.item_phases) +
                     (best.output_finite || mode != sm90::KernelMode::kFull || no_combine ? "" : "  NaN IN OUTPUT"));
      if (best.clock.samples > 0) {
        // A line of its own: scripts read the table's columns by position.
        fmt::print("  sm clock {} {}: {}{}\n", bc.name, best.policy, best.clock.describe(),
                   best.graph_clock.samples > 0 ? "; graph " + best.graph_clock.describe() : std::string());
      }
      if (best.path) fmt::print("  path {} {}: {}\n", bc.name, best.policy, best.path->summary());
      if (best.combine_fallbacks > 0) {
        fmt::print("  early merges {} {}: {} waits gave up and waited for the whole decode\n", bc.name, best.policy,
                   best.combine_fallbacks);
      }
      nlohmann::json r = {{"case", bc.name},          {"policy", best.policy},     {"kv_dtype", kv_dtype_name(kv_dtype)}, {"q_dtype", o.q_dtype},
                          {"page_size", page_size}, {"page_runs", o.page_runs}, {"median_us", best.median_us}, {"plan_us", best.plan_us}, {"host_us", best.host_us},
                          {"gbps", gbps},             {"pct_of_copy", pct},          {"tflops", tflops},
                          {"split_kv", best.split_kv}, {"output_finite", best.output_finite},
                          {"combine_fallbacks", best.combine_fallbacks}};
      if (best.rotated_us > 0) {
        r["rotated_median_us"] = best.rotated_us;
        r["rotated_pct_of_copy"] = rot_pct;
        r["rotated_copies"] = copies;
      }
      if (bc.reference_pct_of_copy) r["reference_pct_of_copy"] = *bc.reference_pct_of_copy;
      if (best.path) {
        const DecodePath& dp = *best.path;
        r["path"] = {{"kernel", dp.kernel},       {"q", dp.q_operand},           {"p", dp.p_operand},
                     {"kv_loader", dp.kv_loader}, {"combine", dp.combine},       {"cta_rows", dp.cta_rows},
                     {"cluster_size", dp.cluster_size}, {"fp8_products", dp.fp8_products}};
      }
      if (best.clock.samples > 0) {
        r["sm_clock_mhz"] = best.clock.mean_sm_mhz;
        r["sm_clock_min_mhz"] = best.clock.min_sm_mhz;
        r["power_capped_fraction"] = best.clock.power_capped;
      }
      if (best.graph_clock.samples > 0) {
        r["graph_sm_clock_mhz"] = best.graph_clock.mean_sm_mhz;
        r["graph_power_capped_fraction"] = best.graph_clock.power_capped;
      }
      if (best.graph_us > 0) {
        r["graph_median_us"] = best.graph_us;
        r["graph_pct_of_copy"] = 100.0 * io_bytes / (best.graph_us * 1e3) / copy_gbps;
      }
      if (!best.graph_ab.empty()) r["graph_ab"] = print_graph_ab(bc.name, best.graph_ab);
      if (best.balance.combine_end_us >= 0) {
        r["combine_start_after_decode_us"] = best.balance.combine_start_us;
        r["combine_end_after_decode_us"] = best.balance.combine_end_us;
        nlohmann::json combine_intervals = nlohmann::json::array();
        for (const auto& iv : best.balance.combine_intervals) combine_intervals.push_back({iv[0], iv[1]});
        r["combine_intervals"] = std::move(combine_intervals);
      }
      if (best.balance.busy_max_over_mean > 0) {
        r["busy_max_over_mean"] = best.balance.busy_max_over_mean;
        r["busy_max_us"] = best.balance.busy_max_us;
        r["busy_mean_us"] = best.balance.busy_mean_us;
        // Each busy CTA's {start us, end us, SM id}: which SMs run slow, across runs.
        nlohmann::json cta_intervals = nlohmann::json::array();
        for (const auto& iv : best.balance.intervals) cta_intervals.push_back({iv[0], iv[1], int(iv[2])});
        r["cta_intervals"] = std::move(cta_intervals);
        if (!best.cta_work.empty()) r["cta_work"] = best.cta_work;
        if (!best.item_phases.empty()) r["item_phases"] = item_phases_json(best.item_phases);
      }
      results.push_back(r);
      if (!best.balance.intervals.empty()) for_svg.push_back(best);
    }
    if (!o.svg_dir.empty() && !for_svg.empty()) {
      const std::string path = o.svg_dir + "/" + bc.name + ".svg";
      std::vector<BalancePanel> panels;
      for (const Measurement& m : for_svg) {
        panels.push_back({m.policy, m.balance.busy_max_over_mean, m.balance.intervals});
      }
      write_balance_svg(path, bc.name, panels);
      fmt::print("wrote {}\n", path);
    }
  }
  require(matched > 0, "bench: no case matches '", o.case_filter, "'");
  if (!o.json_path.empty()) {
    std::time_t now = std::time(nullptr);
    char date[32];
    std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    nlohmann::json doc = {{"gpu", dev.name}, {"sm_count", dev.sm_count}, {"ctas", sms}, {"max_active_2cta_clusters", pair_clusters}, {"commit", o.commit},
                          {"date", date},    {"copy_gbps", copy_gbps}, {"empty_kernel_us", empty_launch_us},   {"results", results}};
    if (copy_clock.samples > 0) doc["copy_sm_clock_mhz"] = copy_clock.mean_sm_mhz;
    doc["heat_ms"] = o.heat_ms;
    doc["cool_ms"] = o.cool_ms;
    std::ofstream f(o.json_path);
    require(f.good(), "bench: cannot write '", o.json_path, "'");
    f << doc.dump(1) << "\n";
    fmt::print("wrote {}\n", o.json_path);
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace

Action add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Time decode + combine per case and policy against the copy ceiling");
  cmd->add_option("--cases", o->cases_path, "Cases JSON (default: bench/cases.json)");
  cmd->add_option("--case", o->case_filter, "Only cases whose name contains this ('all' for every case)");
  cmd->add_option("--policies", o->policies, "Comma-separated: worklist,static,static_persistent");
  cmd->add_option("--json", o->json_path, "Write the results as JSON to this file");
  cmd->add_option("--commit", o->commit, "Commit recorded in the JSON");
  cmd->add_option("--runs", o->runs, "Timed runs per measurement (median)")->check(CLI::Range(50, 100000));
  cmd->add_option("--warmup", o->warmup, "Warm-up runs")->check(CLI::Range(1, 10000));
  cmd->add_option("--heat-ms", o->heat_ms,
                  "Before each policy's timed measurement, run the call back to back this many ms (default 0: "
                  "a burst from an idle GPU; ~1500 reaches the power-capped clock of sustained serving)")
      ->check(CLI::Range(0, 600000));
  cmd->add_option("--cool-ms", o->cool_ms,
                  "Before each case's timed measurement, leave the GPU idle this many ms so that the previous "
                  "case's power draw no longer holds its clock down (default 1000; 0: back to back)")
      ->check(CLI::Range(0, 600000));
  cmd->add_option("--page-size", o->page_size, "Cache page size for every case (default 0: the case's, else 64)")
      ->check(CLI::IsMember({0, 1, 2, 4, 8, 16, 32, 64, 128, 256}));
  cmd->add_option("--page-runs", o->page_runs,
                  "Place the cache's pages at random in runs of this many physically consecutive pages (default 1)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--kv-dtype", o->kv_dtype, "Cache dtype for every case (default: the case's, else bf16)")
      ->check(CLI::IsMember({"bf16", "fp8_e4m3", "fp8_e4m3_block"}));
  cmd->add_option("--q-dtype", o->q_dtype,
                  "Q dtype (default bf16; fp8_e4m3: the caller's e4m3 Q with one scale, for the fp8 caches (the "
                  "per-block cache's: the latent part, the rope part bf16), so no Q quantiser runs)")
      ->check(CLI::IsMember({"bf16", "fp8_e4m3"}));
  cmd->add_option("--sms", o->sms, "CTA budget (default 0: every SM, or every SM co-scheduled in 2-CTA clusters)")->check(CLI::Range(0, 4096));
  cmd->add_flag("--balance", o->balance,
                "Also record each CTA's busy interval (%globaltimer) once per measurement and print busy max/mean");
  cmd->add_option("--svg-dir", o->svg_dir, "With --balance: write <dir>/<case>.svg, one panel per policy");
  add_cost_options(cmd, o->cost);
  cmd->add_option("--batch-invariant", o->invariant_blocks,
                  "Also time the batch-invariant work list (PlanOptions::batch_invariant_split_blocks = N KV blocks)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_flag("--device-plan", o->device_plan,
                "Also time the work list planned on the GPU (plan_us is then the GPU replan time)");
  cmd->add_flag("--graph", o->graph,
                "Also time each work-list call captured in a CUDA graph (replays, each on an idle GPU as the runs "
                "are): the call without the host's work before its first kernel");
  cmd->add_option("--graph-ab", o->graph_ab_rounds,
                  "Also time the work-list call eager and replayed from a CUDA graph, with and without its combine, "
                  "in this many alternated rounds (each measurement after --cool-ms idle)")
      ->check(CLI::Range(0, 100));
  cmd->add_flag("--spike", o->spike,
                "Also time the work-list kernel with loads only (consumers just release stages) and with math only "
                "(no KV loads): the loader's and the math loop's ceilings (bf16), and every kernel without the "
                "combine (split requests' outputs unwritten): what any combine could save");
  return [o] { return run_bench(*o); };
}

}  // namespace kbmla::tools
