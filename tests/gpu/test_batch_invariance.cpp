// Batch invariance on the GPU (issue 6): with PlanOptions::batch_invariant_split_blocks a
// request's output is bitwise the same alone and inside two different batches (other
// requests, another position, another CTA budget).
#include <cstring>

#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

struct RowsOfX {
  std::vector<ref::Bf16> out;
  std::vector<float> lse;
};

// Decodes `seqlens` with request `x` holding the same q and keys as request 0 of `alone`.
RowsOfX decode_with_x(const ref::RandomProblem<ref::Bf16>& alone, std::vector<int32_t> seqlens, int x, int ctas,
                      int heads, int q_len, int chunk) {
  ref::Problem shape = alone.problem;
  shape.batch = int(seqlens.size());
  auto data = ref::make_random_problem<ref::Bf16>(shape, seqlens, 99 + x);
  const size_t q_rows = size_t(q_len) * heads;
  std::copy_n(alone.q.begin(), q_rows * 576, data.q.begin() + size_t(x) * q_rows * 576);
  for (int j = 0; j < (seqlens[x] + 63) / 64; ++j) {
    std::copy_n(&alone.cache[size_t(alone.block_table[j]) * 64 * 576], 64 * 576,
                &data.cache[size_t(data.block_table[size_t(x) * data.problem.max_pages + j]) * 64 * 576]);
  }
  DecodeConfig config;
  config.heads = heads;
  config.q_len = q_len;
  config.softmax_scale = float(shape.scale);
  PlanOptions options;
  options.num_ctas = ctas;
  options.batch_invariant_split_blocks = chunk;
  DevicePlan plan = DevicePlan::create(config, seqlens, options);
  DeviceProblem dev(data, plan);
  KvCache kv(dev.cache.ptr, data.problem.num_pages, 64);
  decode(plan, kv, dev.args(data.problem.max_pages));
  EXPECT_EQ(read_device_errors(dev.ws.ptr, nullptr), 0u);
  const std::vector<ref::Bf16> out = dev.out.download();
  const std::vector<float> lse = dev.lse.download();
  RowsOfX r;
  r.out.assign(out.begin() + x * q_rows * 512, out.begin() + (x + 1) * q_rows * 512);
  r.lse.assign(lse.begin() + x * q_rows, lse.begin() + (x + 1) * q_rows);
  return r;
}

void expect_bitwise_invariant(int heads, int q_len, int32_t x_len, int chunk) {
  ref::Problem shape;
  shape.batch = 1;
  shape.q_len = q_len;
  shape.heads = heads;
  shape.scale = 1.0 / std::sqrt(576.0);
  const auto alone = ref::make_random_problem<ref::Bf16>(shape, {x_len}, 7);
  const RowsOfX a = decode_with_x(alone, {x_len}, 0, 0, heads, q_len, chunk);
  const RowsOfX b = decode_with_x(alone, {300, x_len, 0, 5000}, 1, 0, heads, q_len, chunk);
  const RowsOfX c = decode_with_x(alone, {20000, 64, 7, 1, 130000, x_len}, 5, 40, heads, q_len, chunk);
  for (const RowsOfX* other : {&b, &c}) {
    ASSERT_EQ(other->out.size(), a.out.size());
    EXPECT_EQ(std::memcmp(other->out.data(), a.out.data(), a.out.size() * sizeof(ref::Bf16)), 0);
    EXPECT_EQ(std::memcmp(other->lse.data(), a.lse.data(), a.lse.size() * sizeof(float)), 0);
  }
}

TEST(GpuBatchInvariance, SameBitsAloneAndInTwoBatches) {
  KBMLA_REQUIRE_SM90();
  expect_bitwise_invariant(16, 4, 9000, 16);     // 141 blocks: 9 splits, narrow combine
  expect_bitwise_invariant(16, 1, 70000, 4);     // 1094 blocks: 219 splits of 5 (the 256 cap), wide combine
  expect_bitwise_invariant(128, 2, 3000, 32);    // 2-CTA clusters, two q tiles
  // 69 splits: alone and in batch b the widest request (the combine's blocks of 8 warps),
  // in batch c beside a 127-split one (16 warps). The order of the merge's sums followed the
  // block size until v55; batch-invariant plans now sum as 16 virtual warps in any block.
  expect_bitwise_invariant(16, 1, 70000, 16);
  // 20 splits: alone and in batch b blocks of 4 warps, in batch c 16.
  expect_bitwise_invariant(16, 4, 20000, 16);
}

}  // namespace
}  // namespace kbmla::test
