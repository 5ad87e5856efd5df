// GPU planner: the same bytes as the host planner (fixed-grid form) over random
// configurations, and replan + decode captured in a CUDA graph, replayed 100 times with
// new seqlens, each replay checked against the float64 reference.
#include <algorithm>
#include <random>

#include "src/runtime/plan_impl.hpp"
#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

PlanShape host_shape_of(const DevicePlan& plan) { return plan.host_plan().shape; }

// Replans `plan` on the device from `seqlens` and compares every array, the counts, and the
// combine's split-request list with the header's counts of it, against the host planner.
void expect_device_plan_matches_host(const DevicePlan& plan, const std::vector<int32_t>& seqlens) {
  DeviceArray<int32_t> dev_seqlens(seqlens);
  plan.replan(dev_seqlens.ptr, nullptr);
  HostPlan got = plan.download();
  HostPlan want = make_host_plan(host_shape_of(plan), seqlens);
  ASSERT_EQ(got.counts.status, kPlanOk);
  EXPECT_EQ(got.work_list, want.work_list);
  EXPECT_EQ(got.num_splits, want.num_splits);
  EXPECT_EQ(got.first_slot, want.first_slot);
  EXPECT_EQ(got.bounds, want.bounds);
  EXPECT_EQ(got.zero_fill, want.zero_fill);
  EXPECT_EQ(got.counts.num_slots, want.counts.num_slots);
  EXPECT_EQ(got.counts.num_items, want.counts.num_items);
  DevicePlan::Impl expect;
  expect.host = want;
  detail::record_split_requests(expect);
  const DevicePlan::Impl& made = plan.impl();
  DevicePlanHeader header{};
  cuda_ok(cudaMemcpy(&header, made.header, sizeof header, cudaMemcpyDeviceToHost), "header");
  ASSERT_EQ(header.num_split_requests, int(expect.split_requests.size()));
  EXPECT_EQ(header.num_wide_requests, expect.num_wide_requests);
  std::vector<int32_t> split_requests(expect.split_requests.size());
  if (!split_requests.empty()) {
    cuda_ok(cudaMemcpy(split_requests.data(), made.split_requests_dev, split_requests.size() * sizeof(int32_t),
                       cudaMemcpyDeviceToHost),
            "split requests");
  }
  EXPECT_EQ(split_requests, expect.split_requests);
}

// Random heads, q_len (up to max_q_len) and causality, in the tests' draw order.
DecodeConfig random_config(std::mt19937_64& rng, int max_q_len) {
  DecodeConfig config;
  config.heads = std::uniform_int_distribution<int>(1, 128)(rng);
  config.q_len = std::uniform_int_distribution<int>(1, max_q_len)(rng);
  config.causal = std::uniform_int_distribution<int>(0, 3)(rng) != 0 || config.q_len == 1;
  config.softmax_scale = 0.1f;
  return config;
}

// A quarter empty, a quarter short (1..short_max), the rest up to 2^long_log shifted right
// by 0..3 x shift_step bits.
std::vector<int32_t> random_seqlens(std::mt19937_64& rng, int batch, int short_max, int long_log, int shift_step) {
  std::uniform_int_distribution<int> coin(0, 3);
  std::vector<int32_t> seqlens(batch);
  for (auto& L : seqlens) {
    const int kind = coin(rng);
    L = kind == 0 ? 0 : kind == 1 ? std::uniform_int_distribution<int>(1, short_max)(rng)
                                  : std::uniform_int_distribution<int>(0, 1 << long_log)(rng) >> coin(rng) * shift_step;
  }
  return seqlens;
}

void replan_and_compare(int i, const DecodeConfig& config, const std::vector<int32_t>& seqlens,
                        const PlanOptions& options) {
  const int batch = int(seqlens.size());
  DevicePlan plan = DevicePlan::create_device_planned(config, batch, options);
  SCOPED_TRACE(::testing::Message() << "config " << i << ": heads " << config.heads << " q_len " << config.q_len
                                    << " batch " << batch << " ctas " << options.num_ctas);
  expect_device_plan_matches_host(plan, seqlens);
}

TEST(GpuPlanner, SameBytesAsTheHostPlanner) {
  KBMLA_REQUIRE_SM90();
  std::mt19937_64 rng(2026);
  std::uniform_int_distribution<int> log_b(0, 8), coin(0, 3);
  // The last batches take the planner's other places (device_walk_data.cuh, walk_place): 1700
  // and 2300 requests walk with their arrays in shared memory and their step records in the
  // plan's global scratch (they no longer fit beside the arrays), 2400 and above with both
  // in the scratch. (Batches up to 256 before them: everything in shared memory, records
  // above 8.)
  const int large_batches[] = {1700, 2300, 2400, 3072, 5000, 12289};
  for (int i = 0; i < 156; ++i) {
    const DecodeConfig config = random_config(rng, 9);
    const int batch = i < 150 ? std::uniform_int_distribution<int>(1, 1 << log_b(rng))(rng) : large_batches[i - 150];
    const std::vector<int32_t> seqlens = random_seqlens(rng, batch, 200, 20, 4);
    PlanOptions options;
    options.num_ctas = coin(rng) ? 132 : std::uniform_int_distribution<int>(2, 132)(rng);
    replan_and_compare(i, config, seqlens, options);
  }
}

// Large batches in every place of the walk's data (device_walk_data.cuh, walk_place): arrays
// and records in shared memory for small CTA budgets, records in the scratch, both in the
// scratch; batch sizes with partial last chunks, q_len up to 16 (several q tiles, both plan
// forms), and seqlens from empty to long.
TEST(GpuPlanner, SameBytesOnLargeBatches) {
  KBMLA_REQUIRE_SM90();
  std::mt19937_64 rng(46);
  std::uniform_int_distribution<int> batch_d(1400, 20000);
  for (int i = 0; i < 16; ++i) {
    const DecodeConfig config = random_config(rng, 16);
    const std::vector<int32_t> seqlens = random_seqlens(rng, batch_d(rng), 300, 17, 3);
    PlanOptions options;
    options.num_ctas = i % 4 == 3 ? std::uniform_int_distribution<int>(2, 32)(rng) : 132;
    replan_and_compare(i, config, seqlens, options);
  }
}

// A negative seqlen fails the plan (its index in the header), in shared memory and in the
// scratch; a decode with the failed plan writes nothing and reports kErrPlanFailed.
TEST(GpuPlanner, NegativeSeqlenFailsThePlanAndRaisesTheErrorWord) {
  KBMLA_REQUIRE_SM90();
  DecodeConfig config;
  config.softmax_scale = 0.1f;
  for (int batch : {2, 5000}) {
    SCOPED_TRACE(::testing::Message() << "batch " << batch);
    // First a good plan whose first request is split (a non-zero split table), then the
    // failed one: it must leave no request with splits and every slot's column empty.
    std::vector<int32_t> lens(size_t(batch), 100);
    lens[0] = 400000;
    DevicePlan plan = DevicePlan::create_device_planned(config, batch);
    DeviceArray<int32_t> seqlens(lens);
    plan.replan(seqlens.ptr, nullptr);
    ASSERT_EQ(plan.device_plan_status(), kPlanOk);
    const DevicePlan::Impl& P = plan.impl();
    int32_t splits0 = 0;
    cuda_ok(cudaMemcpy(&splits0, P.splits.num_splits, sizeof splits0, cudaMemcpyDeviceToHost), "num_splits");
    ASSERT_GT(splits0, 1);
    const int bad = batch - 1 - batch / 3;
    lens[size_t(bad)] = -5;
    cuda_ok(cudaMemcpy(seqlens.ptr, lens.data(), lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "seqlens");
    plan.replan(seqlens.ptr, nullptr);
    EXPECT_EQ(plan.device_plan_status(), kPlanNegativeSeqlen);
    DevicePlanHeader header{};
    cuda_ok(cudaMemcpy(&header, P.header, sizeof header, cudaMemcpyDeviceToHost), "header");
    EXPECT_EQ(header.bad_index, bad);
    std::vector<int32_t> splits(size_t(batch), -1);
    cuda_ok(cudaMemcpy(splits.data(), P.splits.num_splits, splits.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
            "num_splits");
    EXPECT_EQ(std::count(splits.begin(), splits.end(), 0), std::ptrdiff_t(batch));
    const int G = P.host.counts.num_clusters;
    std::vector<int32_t> first_row(size_t(G), 0);
    cuda_ok(cudaMemcpy(first_row.data(), P.work_list, first_row.size() * sizeof(int32_t), cudaMemcpyDeviceToHost),
            "work list");
    for (int g = 0; g < G; ++g) EXPECT_LT(first_row[size_t(g)], 0) << "slot " << g;
  }
  ref::Problem shape;
  shape.batch = 3;
  shape.q_len = 1;
  shape.heads = 16;
  shape.scale = 0.1;
  auto data = ref::make_random_problem<ref::Bf16>(shape, {300, 300, 300}, 5);
  config.heads = shape.heads;
  config.q_len = shape.q_len;
  DevicePlan plan = DevicePlan::create_device_planned(config, shape.batch);
  DeviceProblem dev(data, plan);
  const std::vector<int32_t> lens = {300, -1, 300};
  cuda_ok(cudaMemcpy(dev.seqlens.ptr, lens.data(), lens.size() * sizeof(int32_t), cudaMemcpyHostToDevice), "seqlens");
  cuda_ok(cudaMemset(dev.out.ptr, 0xff, dev.out.count * 2), "poison");  // NaN
  plan.replan(dev.seqlens.ptr, nullptr);
  KvCache kv(dev.cache.ptr, data.problem.num_pages, 64);
  decode(plan, kv, dev.args(data.problem.max_pages));
  EXPECT_NE(read_device_errors(dev.ws.ptr, nullptr) & kErrPlanFailed, 0u);
  const std::vector<ref::Bf16> out = dev.out.download();
  for (const ref::Bf16& v : out) ASSERT_TRUE(std::isnan(ref::bf16_to_float(v))) << "the decode wrote an output";
}

TEST(GpuPlanner, GraphCapturedStepReplaysWithNewSeqlens) {
  KBMLA_REQUIRE_SM90();
  // One cache and block table large enough for every replay: 3 requests of up to 448 tokens.
  ref::Problem shape;
  shape.batch = 3;
  shape.q_len = 2;
  shape.heads = 16;
  shape.scale = 1.0 / std::sqrt(192.0);
  auto data = ref::make_random_problem<ref::Bf16>(shape, {448, 448, 448}, 77);
  ref::Problem p = data.problem;
  DecodeConfig config;
  config.heads = p.heads;
  config.q_len = p.q_len;
  config.softmax_scale = float(p.scale);
  PlanOptions options;
  options.num_ctas = 24;  // small budget: long requests get split, the combine runs
  DevicePlan plan = DevicePlan::create_device_planned(config, p.batch, options);
  DeviceProblem dev(data, plan);
  auto& [q, cache, out, block_table, seqlens, lse, ws] = dev;
  KvCache kv(cache.ptr, p.num_pages, 64);
  cudaStream_t stream;
  cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const DecodeArgs args = dev.args(p.max_pages, stream);
  cudaGraph_t graph;
  cuda_ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), "begin capture");
  plan.replan(seqlens.ptr, stream);
  decode(plan, kv, args);
  cuda_ok(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec;
  cuda_ok(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> len(0, 448);
  for (int replay = 0; replay < 100; ++replay) {
    std::vector<int32_t> step = {len(rng), len(rng), len(rng)};
    if (replay % 10 == 0) step[replay % 3] = 448;
    cuda_ok(cudaMemcpyAsync(seqlens.ptr, step.data(), 12, cudaMemcpyHostToDevice, stream), "seqlens");
    cuda_ok(cudaMemsetAsync(out.ptr, 0xff, out.count * 2, stream), "poison");  // NaN
    cuda_ok(cudaMemsetAsync(lse.ptr, 0xff, lse.count * 4, stream), "poison");
    cuda_ok(cudaGraphLaunch(exec, stream), "graph launch");
    cuda_ok(cudaStreamSynchronize(stream), "replay");
    auto inputs = data.inputs();
    inputs.seqlens = step;
    ref::Outputs expect = ref::reference_decode(p, inputs);
    std::vector<ref::Bf16> got_out = out.download();
    std::vector<float> got_lse = lse.download();
    std::vector<double> o(got_out.size()), l(got_lse.begin(), got_lse.end());
    for (size_t i = 0; i < o.size(); ++i) o[i] = ref::bf16_to_float(got_out[i]);
    ref::Comparison cmp = ref::compare(p, expect, o, l);
    SCOPED_TRACE(::testing::Message() << "replay " << replay << " seqlens " << step[0] << " " << step[1] << " "
                                      << step[2]);
    ASSERT_FALSE(cmp.any_nan);
    ASSERT_FALSE(cmp.infinite_lse_mismatch);
    ASSERT_LT(cmp.rel_frobenius, 1e-2);
    ASSERT_LT(cmp.worst_row_rel, 3e-2);
    ASSERT_LT(cmp.lse_max_abs, 1e-3);
  }
  EXPECT_EQ(read_device_errors(ws.ptr, stream), 0u);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace kbmla::test
