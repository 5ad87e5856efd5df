// Engine-shaped arguments on the GPU: Q with padded rows or as q_nope + q_pe, out with
// padded rows, LSE in vLLM's [heads, tokens] layout and in base 2. Each must give the
// dense call's result bit for bit (same plan, same arithmetic), and write nothing outside
// its rows (the padding stays poisoned).
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "tests/gpu/gpu_harness.hpp"

namespace kbmla::test {
namespace {

struct Dense {
  std::vector<ref::Bf16> out;
  std::vector<float> lse;
};

// A random causal problem (d_qk 576, softmax scale 1 / sqrt(576)).
ref::RandomProblem<ref::Bf16> random_problem(int heads, int q_len, const std::vector<int32_t>& seqlens, uint64_t seed) {
  ref::Problem shape;
  shape.batch = int(seqlens.size());
  shape.q_len = q_len;
  shape.heads = heads;
  shape.scale = 1.0 / std::sqrt(576.0);
  return ref::make_random_problem<ref::Bf16>(shape, seqlens, seed);
}

// decode()'s error message for these arguments ("no error" when it runs).
std::string decode_error(const DevicePlan& plan, const KvCache& cache, const DecodeArgs& args) {
  try {
    decode(plan, cache, args);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// The reference decode of a test: into poisoned outputs, no device error, no NaN; its out
// and lse in `dense`.
void decode_dense(const DevicePlan& plan, const KvCache& kv, const DecodeArgs& args, DeviceProblem& dev,
                  Dense& dense) {
  dev.out.poison();
  dev.lse.poison();
  decode(plan, kv, args);
  ASSERT_EQ(read_device_errors(dev.ws.ptr, nullptr), 0u);
  dense = Dense{dev.out.download(), dev.lse.download()};
  for (const ref::Bf16& v : dense.out) ASSERT_FALSE(std::isnan(ref::bf16_to_float(v)));
}

// The decode with `args` (another layout of the same inputs, writing dev's out and lse)
// gives `dense`, bit for bit.
void expect_same_as_dense(const DevicePlan& plan, const KvCache& kv, const DecodeArgs& args, DeviceProblem& dev,
                          const Dense& dense, size_t rows) {
  Dense got;
  ASSERT_NO_FATAL_FAILURE(decode_dense(plan, kv, args, dev, got));
  EXPECT_EQ(std::memcmp(got.out.data(), dense.out.data(), rows * 512 * 2), 0);
  EXPECT_EQ(std::memcmp(got.lse.data(), dense.lse.data(), rows * 4), 0);
}

void check_layouts(int heads, int q_len, const std::vector<int32_t>& seqlens, int ctas) {
  SCOPED_TRACE(::testing::Message() << "heads " << heads << " q_len " << q_len << " ctas " << ctas);
  const auto data = random_problem(heads, q_len, seqlens, 11);
  const ref::Problem& shape = data.problem;
  const int B = shape.batch;
  const size_t rows = size_t(B) * q_len * heads, tokens = size_t(B) * q_len;
  DecodeConfig config;
  config.heads = heads;
  config.q_len = q_len;
  config.softmax_scale = float(shape.scale);
  PlanOptions options;
  options.num_ctas = ctas;
  DevicePlan plan = DevicePlan::create(config, seqlens, options);
  DeviceProblem dev(data, plan);
  KvCache kv(dev.cache.ptr, data.problem.num_pages, 64);
  Dense dense;
  ASSERT_NO_FATAL_FAILURE(decode_dense(plan, kv, dev.args(data.problem.max_pages), dev, dense));

  // Padded Q rows (640 elements, NaN padding), padded out rows (1024), LSE [heads, tokens]
  // in base 2.
  std::vector<ref::Bf16> q_pad(rows * 640, ref::Bf16{0xffff});
  for (size_t r = 0; r < rows; ++r) std::copy_n(&data.q[r * 576], 576, &q_pad[r * 640]);
  DeviceArray<ref::Bf16> q_padded(q_pad), out_padded(rows * 1024);
  DeviceArray<float> lse_t(rows);
  out_padded.poison();
  lse_t.poison();
  DecodeArgs a = dev.args(data.problem.max_pages);
  a.q = q_padded.ptr;
  a.q_strides = {int64_t(q_len) * heads * 640, int64_t(heads) * 640, 640};
  a.out = out_padded.ptr;
  a.out_strides = {int64_t(q_len) * heads * 1024, int64_t(heads) * 1024, 1024};
  a.lse = lse_t.ptr;
  a.lse_strides = {q_len, 1, int64_t(tokens)};
  a.lse_base = LseBase::k2;
  decode(plan, kv, a);
  ASSERT_EQ(read_device_errors(dev.ws.ptr, nullptr), 0u);
  const std::vector<ref::Bf16> got = out_padded.download();
  const std::vector<float> got_lse = lse_t.download();
  for (size_t r = 0; r < rows; ++r) {
    ASSERT_EQ(std::memcmp(&got[r * 1024], &dense.out[r * 512], 512 * 2), 0) << "row " << r;
    for (int c = 512; c < 1024; ++c) ASSERT_EQ(got[r * 1024 + c].bits, 0xffff) << "padding of row " << r;
    const size_t token = r / heads, h = r % heads;
    const float l2 = got_lse[h * tokens + token], le = dense.lse[r];
    if (std::isinf(le)) {
      EXPECT_TRUE(std::isinf(l2) && l2 < 0) << "row " << r;
    } else {
      EXPECT_NEAR(l2, le * 1.4426950408889634, 1e-5 * std::max(1.f, std::fabs(le))) << "row " << r;
    }
  }

  // Q as q_nope + q_pe: views of one [tokens, heads, 576] buffer, then two dense tensors.
  std::vector<ref::Bf16> nope(rows * 512), pe(rows * 64);
  for (size_t r = 0; r < rows; ++r) {
    std::copy_n(&data.q[r * 576], 512, &nope[r * 512]);
    std::copy_n(&data.q[r * 576 + 512], 64, &pe[r * 64]);
  }
  DeviceArray<ref::Bf16> q_nope(nope), q_pe(pe);
  for (int variant = 0; variant < 2; ++variant) {
    SCOPED_TRACE(variant == 0 ? "q_nope / q_pe as views of q" : "q_nope / q_pe as their own tensors");
    DecodeArgs s = dev.args(data.problem.max_pages);
    if (variant == 0) {
      s.q_strides = {int64_t(q_len) * heads * 576, int64_t(heads) * 576, 576};
      s.q_pe = dev.q.ptr + 512;
      s.q_pe_strides = s.q_strides;
    } else {
      s.q = q_nope.ptr;
      s.q_pe = q_pe.ptr;
    }
    expect_same_as_dense(plan, kv, s, dev, dense, rows);
  }
}

TEST(GpuEngineArgs, StridedQOutLseAndSplitQMatchTheDenseCall) {
  KBMLA_REQUIRE_SM90();
  // Splits (16 CTAs for 5000 keys), a request with no keys (zero-filled by the combine)
  // and one shorter than q_len (rows with no visible key).
  check_layouts(16, 4, {5000, 0, 3, 900}, 16);
  check_layouts(128, 2, {3000, 1, 700}, 12);  // 2-CTA clusters
  check_layouts(24, 9, {2000, 130}, 0);       // tiles across token boundaries
}

// Q given in e4m3 (fp8 cache): rows padded to 640 bytes give the dense call's result bit
// for bit; the argument checks name what is wrong.
TEST(GpuEngineArgs, E4m3QWithPaddedRowsAndItsChecks) {
  KBMLA_REQUIRE_SM90();
  const int heads = 16, q_len = 2;
  const std::vector<int32_t> seqlens = {300, 1500};
  const auto data = random_problem(heads, q_len, seqlens, 5);
  const ref::Problem& shape = data.problem;
  const size_t rows = size_t(shape.batch) * q_len * heads;
  std::vector<uint8_t> cache8(data.cache.size()), q8(rows * 576), q8_pad(rows * 640, 0x7f);
  for (size_t i = 0; i < cache8.size(); ++i) cache8[i] = ref::float_to_e4m3(ref::bf16_to_float(data.cache[i]) * 256.f);
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = ref::float_to_e4m3(ref::bf16_to_float(data.q[i]) * 64.f);
  for (size_t r = 0; r < rows; ++r) std::copy_n(&q8[r * 576], 576, &q8_pad[r * 640]);
  DecodeConfig config;
  config.heads = heads;
  config.q_len = q_len;
  config.softmax_scale = float(shape.scale);
  config.kv_dtype = KvDtype::kFp8E4m3;
  DevicePlan plan = DevicePlan::create(config, seqlens);
  DeviceProblem dev(data, plan);
  DeviceArray<uint8_t> dev_cache8(cache8), dev_q8(q8), dev_q8_pad(q8_pad);
  DeviceArray<float> kv_scale(std::vector<float>{1.f / 256.f}), q_scale(std::vector<float>{1.f / 64.f});
  KvCache kv(dev_cache8.ptr, data.problem.num_pages, 64, 576, KvDtype::kFp8E4m3);
  DecodeArgs a = dev.args(data.problem.max_pages);
  a.kv_scale = kv_scale.ptr;
  a.q = dev_q8.ptr;
  a.q_dtype = QDtype::kFp8E4m3;
  a.q_scale = q_scale.ptr;
  Dense dense;
  ASSERT_NO_FATAL_FAILURE(decode_dense(plan, kv, a, dev, dense));

  DecodeArgs padded = a;
  padded.q = dev_q8_pad.ptr;
  padded.q_strides = {int64_t(q_len) * heads * 640, int64_t(heads) * 640, 640};
  expect_same_as_dense(plan, kv, padded, dev, dense, rows);

  auto error_of = [&](const DecodeArgs& args, const DevicePlan& pl, const KvCache& cache) {
    return decode_error(pl, cache, args);
  };
  DecodeArgs bad = a;
  bad.q_scale = nullptr;
  EXPECT_NE(error_of(bad, plan, kv).find("an e4m3 Q needs q_scale"), std::string::npos);
  bad = a;
  bad.q_pe = dev_q8.ptr;
  EXPECT_NE(error_of(bad, plan, kv).find("q_pe must be null"), std::string::npos);
  bad = padded;
  bad.q_strides = {int64_t(q_len) * heads * 584, int64_t(heads) * 584, 584};  // 8 bytes, not 16
  EXPECT_NE(error_of(bad, plan, kv).find("row stride (584 elements) must be >= 576 and a multiple of 16"),
            std::string::npos);
  bad = a;
  bad.q_dtype = static_cast<QDtype>(3);
  EXPECT_NE(error_of(bad, plan, kv).find("q_dtype (3) is not one of"), std::string::npos);
  // A bf16 cache reads a bf16 Q; a bf16 Q has no scale of its own.
  DecodeConfig bf16_config = config;
  bf16_config.kv_dtype = KvDtype::kBFloat16;
  DevicePlan bf16_plan = DevicePlan::create(bf16_config, seqlens);
  KvCache bf16_kv(dev.cache.ptr, data.problem.num_pages, 64);
  DeviceArray<uint8_t> bf16_ws(bf16_plan.workspace_bytes());
  bad = dev.args(data.problem.max_pages);
  bad.workspace = bf16_ws.ptr;
  bad.workspace_bytes = bf16_ws.count;
  bad.q_dtype = QDtype::kFp8E4m3;
  bad.q_scale = q_scale.ptr;
  EXPECT_NE(error_of(bad, bf16_plan, bf16_kv).find("q_dtype kFp8E4m3 needs an fp8 cache (kv_dtype kFp8E4m3 or "
                                                   "kFp8E4m3PerBlock); the bf16 kernel reads a bf16 Q"),
            std::string::npos);
  bad = a;
  bad.q = dev.q.ptr;
  bad.q_dtype = QDtype::kBFloat16;
  EXPECT_NE(error_of(bad, plan, kv).find("q_scale is set but q is bf16"), std::string::npos);
}

// The per-block-scale cache with Q as q_nope + q_pe in padded buffers (the rope map reads
// q_pe's bytes, the quantiser q_nope's strided rows): the dense call's result bit for bit;
// then the argument checks particular to it.
// Q as q_nope rows of 640 and q_pe rows of 72 (the padding poisoned with NaN), and the
// arguments `a` reading them instead of its dense Q.
struct PaddedSplitQ {
  DeviceArray<ref::Bf16> nope, pe;
  PaddedSplitQ(const std::vector<ref::Bf16>& q, size_t rows)
      : nope(split_part(q, rows, 0, 512, 640)), pe(split_part(q, rows, 512, 64, 72)) {}
  static std::vector<ref::Bf16> split_part(const std::vector<ref::Bf16>& q, size_t rows, int col, int cols, int pitch) {
    std::vector<ref::Bf16> part(rows * pitch, ref::float_to_bf16(NAN));
    for (size_t r = 0; r < rows; ++r) std::copy_n(&q[r * 576 + col], cols, &part[r * pitch]);
    return part;
  }
  DecodeArgs args(DecodeArgs a, int heads, int q_len) const {
    a.q = nope.ptr;
    a.q_strides = {int64_t(q_len) * heads * 640, int64_t(heads) * 640, 640};
    a.q_pe = pe.ptr;
    a.q_pe_strides = {int64_t(q_len) * heads * 72, int64_t(heads) * 72, 72};
    return a;
  }
};

DecodeConfig fp8_config(int heads, int q_len, double scale, KvDtype dtype) {
  DecodeConfig config;
  config.heads = heads;
  config.q_len = q_len;
  config.softmax_scale = float(scale);
  config.kv_dtype = dtype;
  return config;
}

// The per-tensor fp8 cache with a bf16 Q as q_nope + q_pe in padded, NaN-poisoned buffers,
// through both of its Q paths (64-row tiles: the split-role kernel's staged Q, whose TMA
// maps take those strides, and the quantiser kernel): the same outputs as the dense call.
TEST(GpuEngineArgs, Fp8CacheWithPaddedSplitQOnBothQPaths) {
  KBMLA_REQUIRE_SM90();
  const RestoreEnvOnExit restore("KBMLA_Q_INLINE");
  const int heads = 16, q_len = 4;  // 64-row tiles
  const std::vector<int32_t> seqlens = {300, 1500, 0, 77};
  const auto data = random_problem(heads, q_len, seqlens, 7);
  const ref::Problem& shape = data.problem;
  const size_t rows = size_t(shape.batch) * q_len * heads;
  std::vector<uint8_t> cache8(data.cache.size());
  for (size_t i = 0; i < cache8.size(); ++i) cache8[i] = ref::float_to_e4m3(ref::bf16_to_float(data.cache[i]) * 256.f);
  DevicePlan plan = DevicePlan::create(fp8_config(heads, q_len, shape.scale, KvDtype::kFp8E4m3), seqlens);
  DeviceProblem dev(data, plan);
  DeviceArray<uint8_t> dev_cache8(cache8);
  const PaddedSplitQ padded(data.q, rows);
  DeviceArray<float> kv_scale(std::vector<float>{1.f / 256.f});
  KvCache kv(dev_cache8.ptr, data.problem.num_pages, 64, 576, KvDtype::kFp8E4m3);
  DecodeArgs a = dev.args(data.problem.max_pages);
  a.kv_scale = kv_scale.ptr;
  Dense dense;
  setenv("KBMLA_Q_INLINE", "never", 1);
  ASSERT_NO_FATAL_FAILURE(decode_dense(plan, kv, a, dev, dense));
  const DecodeArgs split = padded.args(a, heads, q_len);
  for (const char* mode : {"never", "always"}) {
    SCOPED_TRACE(std::string("KBMLA_Q_INLINE=") + mode);
    setenv("KBMLA_Q_INLINE", mode, 1);
    expect_same_as_dense(plan, kv, a, dev, dense, rows);
    expect_same_as_dense(plan, kv, split, dev, dense, rows);
  }
  setenv("KBMLA_Q_INLINE", "sometimes", 1);
  EXPECT_NE(decode_error(plan, kv, a).find("KBMLA_Q_INLINE='sometimes' must be auto, always or never"),
            std::string::npos);
}

// The per-block cache's narrow kernel (16 rows) with q_nope + q_pe padded: its consumers
// quantise the latent part from the q_nope rows, the rope part comes by TMA from q_pe;
// bit for bit the quantiser's path.
TEST(GpuEngineArgs, Fp8BlockNarrowTileWithPaddedSplitQOnBothQPaths) {
  KBMLA_REQUIRE_SM90();
  const RestoreEnvOnExit restore("KBMLA_Q_INLINE");
  const int heads = 16, q_len = 1;
  const std::vector<int32_t> seqlens = {300, 1500, 77, 0};
  const auto data = random_problem(heads, q_len, seqlens, 8);
  const size_t rows = size_t(data.problem.batch) * q_len * heads, tokens = data.cache.size() / 576;
  std::vector<uint8_t> cache8(tokens * ref::kFp8BlockTokenBytes);
  std::vector<float> v(576);
  for (size_t t = 0; t < tokens; ++t) {
    for (int d = 0; d < 576; ++d) v[d] = ref::bf16_to_float(data.cache[t * 576 + d]);
    ref::encode_fp8_block_token(v.data(), v.data() + 512, cache8.data() + t * ref::kFp8BlockTokenBytes);
  }
  DevicePlan plan =
      DevicePlan::create(fp8_config(heads, q_len, data.problem.scale, KvDtype::kFp8E4m3PerBlock), seqlens);
  DeviceProblem dev(data, plan);
  DeviceArray<uint8_t> dev_cache8(cache8);
  const PaddedSplitQ padded(data.q, rows);
  KvCache kv(dev_cache8.ptr, data.problem.num_pages, 64, 576, KvDtype::kFp8E4m3PerBlock);
  const DecodeArgs a = dev.args(data.problem.max_pages);
  Dense dense;
  setenv("KBMLA_Q_INLINE", "never", 1);
  ASSERT_NO_FATAL_FAILURE(decode_dense(plan, kv, a, dev, dense));
  for (const char* mode : {"never", "always"}) {
    SCOPED_TRACE(std::string("KBMLA_Q_INLINE=") + mode);
    setenv("KBMLA_Q_INLINE", mode, 1);
    expect_same_as_dense(plan, kv, a, dev, dense, rows);
    expect_same_as_dense(plan, kv, padded.args(a, heads, q_len), dev, dense, rows);
  }
}

TEST(GpuEngineArgs, Fp8BlockCacheWithSplitQAndItsChecks) {
  KBMLA_REQUIRE_SM90();
  const int heads = 16, q_len = 2;
  const std::vector<int32_t> seqlens = {300, 1500};
  const auto data = random_problem(heads, q_len, seqlens, 6);
  const ref::Problem& shape = data.problem;
  const size_t rows = size_t(shape.batch) * q_len * heads, tokens = data.cache.size() / 576;
  std::vector<uint8_t> cache8(tokens * ref::kFp8BlockTokenBytes);
  std::vector<float> v(576);
  for (size_t t = 0; t < tokens; ++t) {
    for (int d = 0; d < 576; ++d) v[d] = ref::bf16_to_float(data.cache[t * 576 + d]);
    ref::encode_fp8_block_token(v.data(), v.data() + 512, cache8.data() + t * ref::kFp8BlockTokenBytes);
  }
  DevicePlan plan = DevicePlan::create(fp8_config(heads, q_len, shape.scale, KvDtype::kFp8E4m3PerBlock), seqlens);
  DeviceProblem dev(data, plan);
  DeviceArray<uint8_t> dev_cache8(cache8);
  const PaddedSplitQ padded(data.q, rows);
  KvCache kv(dev_cache8.ptr, data.problem.num_pages, 64, 576, KvDtype::kFp8E4m3PerBlock);
  DecodeArgs a = dev.args(data.problem.max_pages);
  Dense dense;
  ASSERT_NO_FATAL_FAILURE(decode_dense(plan, kv, a, dev, dense));

  expect_same_as_dense(plan, kv, padded.args(a, heads, q_len), dev, dense, rows);

  auto error_of = [&](const DecodeArgs& args, const KvCache& cache) { return decode_error(plan, cache, args); };
  DeviceArray<float> scale(std::vector<float>{1.f});
  DecodeArgs bad = a;
  bad.kv_scale = scale.ptr;
  EXPECT_NE(error_of(bad, kv).find("kv_scale is set but the cache is fp8_e4m3_block (its scales are in the cache)"),
            std::string::npos);
  // An e4m3 Q for this cache is its latent part in q (512 bytes a row) and the rope in q_pe:
  // q_pe missing, a latent row stride off 16 bytes, no scale.
  bad = a;
  bad.q_dtype = QDtype::kFp8E4m3;
  bad.q_scale = scale.ptr;
  bad.q_pe = nullptr;
  bad.q_pe_strides = {};
  EXPECT_NE(error_of(bad, kv).find("an e4m3 Q for the per-block cache comes as its latent part in e4m3 (q, 512 bytes a "
                                   "row) and its rope part in bf16 (q_pe, 64 values a row); q_pe must be a non-null"),
            std::string::npos);
  DeviceArray<ref::Bf16> rope(size_t(rows) * 64);
  bad.q_pe = rope.ptr;
  bad.q_strides = {int64_t{q_len} * heads * 520, int64_t{heads} * 520, 520};
  EXPECT_NE(error_of(bad, kv).find("q (e4m3 latent) row stride (520 elements) must be >= 512 and a multiple of 16"),
            std::string::npos);
  bad.q_strides = {};
  bad.q_scale = nullptr;
  EXPECT_NE(error_of(bad, kv).find("an e4m3 Q needs q_scale"), std::string::npos);
  KvCache per_tensor(dev_cache8.ptr, data.problem.num_pages, 64, 576, KvDtype::kFp8E4m3);
  EXPECT_NE(error_of(a, per_tensor).find("the cache's dtype (fp8_e4m3) does not match the plan's config kv_dtype "
                                         "(fp8_e4m3_block)"),
            std::string::npos);
}

}  // namespace
}  // namespace kbmla::test
