// Decode context parallelism on the GPU: a problem's keys sharded over `world` ranks
// (contiguous or interleaved), each rank decoding only its shard with the causal mask on
// global positions, the partials merged by LSE, against the float64 reference of the
// whole problem. GpuDcp runs every rank on one GPU and merges with dcp_merge; GpuDcpNccl
// runs two ranks on two GPUs and merges through NCCL (skips with fewer GPUs or no NCCL).
#include <thread>

#include "kbmla/dcp.hpp"
#include "src/dcp/nccl_api.hpp"
#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

// One rank's shard in the paged format: its local keys copied, in order, into fresh pages.
struct Shard {
  std::vector<ref::Bf16> cache;
  std::vector<int32_t> block_table, seqlens, kv_offsets;
  int max_pages = 1;
  int64_t num_pages = 1;
};

Shard make_shard(const ref::RandomProblem<ref::Bf16>& full, int world, int rank, DcpLayout layout) {
  const ref::Problem& p = full.problem;
  Shard s;
  std::vector<std::vector<int64_t>> global_of(size_t(p.batch));
  for (int b = 0; b < p.batch; ++b) {
    const int G = full.seqlens[b];
    int first = 0, count = 0;
    if (layout == DcpLayout::kInterleaved) {
      count = G > rank ? (G - rank + world - 1) / world : 0;
    } else {  // uneven contiguous runs: rank r takes [G r / world, G (r + 1) / world)
      first = int(int64_t{G} * rank / world);
      count = int(int64_t{G} * (rank + 1) / world) - first;
    }
    for (int j = 0; j < count; ++j) {
      global_of[size_t(b)].push_back(layout == DcpLayout::kInterleaved ? int64_t{j} * world + rank : first + j);
    }
    s.seqlens.push_back(count);
    s.kv_offsets.push_back(first);
    s.max_pages = std::max(s.max_pages, (count + 63) / 64);
  }
  s.block_table.assign(size_t(p.batch) * s.max_pages, ref::kPoisonPageIndex);
  int64_t page = 0;
  for (int b = 0; b < p.batch; ++b) {
    for (int j = 0; j < s.seqlens[b]; j += 64) s.block_table[size_t(b) * s.max_pages + j / 64] = int32_t(page++);
  }
  s.num_pages = std::max<int64_t>(page, 1);
  s.cache.assign(size_t(s.num_pages) * 64 * 576, ref::Bf16{0xffff});  // NaN tails
  for (int b = 0; b < p.batch; ++b) {
    for (int j = 0; j < s.seqlens[b]; ++j) {
      const int64_t g = global_of[size_t(b)][size_t(j)];
      const int64_t src = int64_t{full.block_table[size_t(b) * p.max_pages + g / 64]} * 64 + g % 64;
      const int64_t dst = int64_t{s.block_table[size_t(b) * s.max_pages + j / 64]} * 64 + j % 64;
      std::copy_n(&full.cache[size_t(src) * 576], 576, &s.cache[size_t(dst) * 576]);
    }
  }
  return s;
}

// Decodes one rank's shard into `partial` (dcp_partial_layout bytes) on the current device.
void decode_rank(const ref::RandomProblem<ref::Bf16>& full, const Shard& s, int world, int rank, DcpLayout layout,
                 void* partial, cudaStream_t stream) {
  const ref::Problem& p = full.problem;
  DecodeConfig config;
  config.heads = p.heads;
  config.q_len = p.q_len;
  config.softmax_scale = float(p.scale);
  config.dcp_world = world;
  config.dcp_rank = rank;
  config.dcp_layout = layout;
  DevicePlan plan = DevicePlan::create(config, s.seqlens);
  DeviceArray<ref::Bf16> q(full.q), cache(s.cache);
  DeviceArray<int32_t> table(s.block_table), seqlens(s.seqlens), global(full.seqlens), offsets(s.kv_offsets);
  DeviceArray<uint8_t> ws(plan.workspace_bytes());
  ws.poison();
  init_workspace(ws.ptr, ws.count, stream);
  KvCache kv(cache.ptr, s.num_pages, 64);
  const DcpPartial part = dcp_partial(partial, p.batch, p.q_len, p.heads);
  DecodeArgs a = make_decode_args(q.ptr, table.ptr, s.max_pages, seqlens.ptr, part.out, part.lse, ws.ptr, ws.count,
                                  stream);
  a.dcp_global_seqlens = global.ptr;
  a.dcp_kv_offsets = layout == DcpLayout::kContiguous ? offsets.ptr : nullptr;
  decode(plan, kv, a);
  EXPECT_EQ(read_device_errors(ws.ptr, stream), 0u) << "rank " << rank;
}

void expect_matches_reference(const ref::RandomProblem<ref::Bf16>& full, const DeviceArray<ref::Bf16>& out,
                              const DeviceArray<float>& lse) {
  const ref::Outputs expect = ref::reference_decode(full.problem, full.inputs());
  const std::vector<ref::Bf16> got = out.download();
  const std::vector<float> got_lse = lse.download();
  std::vector<double> o(got.size()), l(got_lse.size());
  for (size_t i = 0; i < o.size(); ++i) o[i] = ref::bf16_to_float(got[i]);
  for (size_t i = 0; i < l.size(); ++i) l[i] = got_lse[i];
  const ref::Comparison c = ref::compare(full.problem, expect, o, l);
  EXPECT_FALSE(c.any_nan);
  EXPECT_FALSE(c.infinite_lse_mismatch);
  EXPECT_LT(c.rel_frobenius, 1e-2);
  EXPECT_LT(c.worst_row_rel, 3e-2);
  EXPECT_LT(c.lse_max_abs, 1e-3);
}

// The merged result's buffers (NaN-poisoned) and the merge arguments that fill them.
struct Merged {
  DeviceArray<ref::Bf16> out;
  DeviceArray<float> lse;
  DcpMergeArgs args;
  Merged(const ref::Problem& p, const void* gathered, int world, cudaStream_t stream)
      : out(size_t(p.batch) * p.q_len * p.heads * 512), lse(size_t(p.batch) * p.q_len * p.heads) {
    out.poison();
    lse.poison();
    args.gathered = gathered;
    args.world = world;
    args.batch = p.batch;
    args.q_len = p.q_len;
    args.heads = p.heads;
    args.out = out.ptr;
    args.lse = lse.ptr;
    args.stream = stream;
  }
};

ref::RandomProblem<ref::Bf16> make_full(int heads, int q_len, const std::vector<int32_t>& seqlens) {
  ref::Problem shape;
  shape.batch = int(seqlens.size());
  shape.q_len = q_len;
  shape.heads = heads;
  shape.scale = 1.0 / std::sqrt(576.0);
  return ref::make_random_problem<ref::Bf16>(shape, seqlens, 5);
}

// Short requests leave some ranks without keys (and some rows without any visible key).
const std::vector<int32_t> kSeqlens = {1, 2, 3, 5, 63, 64, 65, 700, 3001, 9000};

TEST(GpuDcp, ShardsMergedOnOneGpuMatchTheReference) {
  KBMLA_REQUIRE_SM90();
  for (DcpLayout layout : {DcpLayout::kContiguous, DcpLayout::kInterleaved}) {
    for (int world : {2, 3}) {
      for (auto [heads, q_len] : {std::pair{16, 1}, std::pair{16, 4}, std::pair{128, 1}}) {
        SCOPED_TRACE(::testing::Message() << (layout == DcpLayout::kInterleaved ? "interleaved" : "contiguous")
                                          << " world " << world << " heads " << heads << " q_len " << q_len);
        const auto full = make_full(heads, q_len, kSeqlens);
        const int B = full.problem.batch;
        const DcpPartialLayout l = dcp_partial_layout(B, q_len, heads);
        DeviceArray<uint8_t> gathered(l.bytes * world);
        gathered.poison();
        for (int r = 0; r < world; ++r) {
          decode_rank(full, make_shard(full, world, r, layout), world, r, layout, gathered.ptr + r * l.bytes, nullptr);
        }
        Merged merged(full.problem, gathered.ptr, world, nullptr);
        dcp_merge(merged.args);
        cuda_ok(cudaDeviceSynchronize(), "merge");
        expect_matches_reference(full, merged.out, merged.lse);
      }
    }
  }
}

#if KBMLA_HAVE_NCCL
TEST(GpuDcpNccl, TwoGpusAllGatherAndMergeMatchTheReference) {
  KBMLA_REQUIRE_SM90();
  int devices = 0;
  cuda_ok(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  if (devices < 2) GTEST_SKIP() << "needs 2 GPUs, found " << devices;
  const detail::NcclApi* nccl = nullptr;
  try {
    nccl = &detail::nccl_api();
  } catch (const Error& e) {
    GTEST_SKIP() << e.what();
  }
  constexpr int kWorld = 2;
  ncclComm_t comms[kWorld];
  const int devs[kWorld] = {0, 1};
  detail::check_nccl(nccl->comm_init_all(comms, kWorld, devs), "ncclCommInitAll");
  for (DcpLayout layout : {DcpLayout::kContiguous, DcpLayout::kInterleaved}) {
    for (int q_len : {1, 4}) {
      SCOPED_TRACE(::testing::Message() << (layout == DcpLayout::kInterleaved ? "interleaved" : "contiguous")
                                        << " q_len " << q_len);
      const int heads = 16;
      const auto full = make_full(heads, q_len, kSeqlens);
      const int B = full.problem.batch;
      const DcpPartialLayout l = dcp_partial_layout(B, q_len, heads);
      std::vector<std::string> failures(kWorld);
      std::vector<std::thread> ranks;
      // One thread per rank (as engines run one process per GPU): the merge is launched
      // after the all-gather on the same stream, which an ncclGroup would defer.
      for (int r = 0; r < kWorld; ++r) {
        ranks.emplace_back([&, r] {
          try {
            cuda_ok(cudaSetDevice(r), "cudaSetDevice");
            cudaStream_t stream;
            cuda_ok(cudaStreamCreate(&stream), "cudaStreamCreate");
            DeviceArray<uint8_t> partial(l.bytes), gathered(l.bytes * kWorld);
            gathered.poison();
            decode_rank(full, make_shard(full, kWorld, r, layout), kWorld, r, layout, partial.ptr, stream);
            Merged merged(full.problem, gathered.ptr, kWorld, stream);
            dcp_allgather_merge(comms[r], partial.ptr, merged.args);
            cuda_ok(cudaStreamSynchronize(stream), "all-gather + merge");
            expect_matches_reference(full, merged.out, merged.lse);
            cudaStreamDestroy(stream);
          } catch (const std::exception& e) {
            failures[size_t(r)] = e.what();
          }
        });
      }
      for (auto& t : ranks) t.join();
      for (int r = 0; r < kWorld; ++r) EXPECT_EQ(failures[size_t(r)], "") << "rank " << r;
    }
  }
  for (ncclComm_t c : comms) nccl->comm_destroy(c);
}
#endif  // KBMLA_HAVE_NCCL

}  // namespace
}  // namespace kbmla::test
