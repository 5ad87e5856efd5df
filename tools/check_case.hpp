// A decode case checked against the float64 reference, shared by `kbmla check` / `kbmla
// demo` (tools/cmd_demo.cpp) and the GPU tests (tests/gpu/gpu_harness.hpp): a random
// problem with poisoned pages (NaN pages and cache tails, huge block-table indices), its
// cache as bf16, e4m3 with one scale or e4m3 with per-block scales, Q as bf16 or e4m3, the
// reference over the values the kernel sees (the decoded cache and Q), the decode on the
// GPU with NaN-poisoned outputs and workspace, and the CPU emulation of the plan's splits.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "kbmla/decode.hpp"
#include "kbmla/device.hpp"
#include "kbmla/error.hpp"
#include "kbmla/planner.hpp"
#include "reference/fp8.hpp"
#include "reference/fp8_block.hpp"
#include "reference/random_problem.hpp"
#include "reference/reference.hpp"

namespace kbmla::check {

inline void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t count = 0;
  DeviceArray() = default;
  explicit DeviceArray(size_t n) : count(n) { cuda_ok(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc"); }
  DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    cuda_ok(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  DeviceArray(DeviceArray&& o) noexcept : ptr(o.ptr), count(o.count) { o.ptr = nullptr; }
  DeviceArray& operator=(DeviceArray&& o) noexcept { std::swap(ptr, o.ptr); std::swap(count, o.count); return *this; }
  ~DeviceArray() { if (ptr) cudaFree(ptr); }
  std::vector<T> download() const {
    std::vector<T> h(count);
    cuda_ok(cudaMemcpy(h.data(), ptr, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return h;
  }
  void poison() { cuda_ok(cudaMemset(ptr, 0xff, std::max<size_t>(count, 1) * sizeof(T)), "poison"); }  // NaN for bf16/fp32
};

// Dense decode arguments over test buffers.
inline DecodeArgs make_decode_args(const void* q, const int32_t* block_table, int max_pages, const int32_t* seqlens,
                                   void* out, float* lse, void* workspace, size_t workspace_bytes,
                                   void* stream = nullptr) {
  DecodeArgs args;
  args.q = q;
  args.block_table = block_table;
  args.max_pages = max_pages;
  args.seqlens = seqlens;
  args.out = out;
  args.lse = lse;
  args.workspace = workspace;
  args.workspace_bytes = workspace_bytes;
  args.stream = stream;
  return args;
}

// A random problem uploaded to the GPU, with outputs and a workspace sized for `plan`.
struct DeviceProblem {
  DeviceArray<ref::Bf16> q, cache, out;
  DeviceArray<int32_t> block_table, seqlens;
  DeviceArray<float> lse;
  DeviceArray<uint8_t> ws;
  DeviceProblem(const ref::RandomProblem<ref::Bf16>& data, const DevicePlan& plan)
      : q(data.q), cache(data.cache),
        out(size_t(data.problem.batch) * data.problem.q_len * data.problem.heads * 512),
        block_table(data.block_table), seqlens(data.seqlens),
        lse(size_t(data.problem.batch) * data.problem.q_len * data.problem.heads), ws(plan.workspace_bytes()) {
    init_workspace(ws.ptr, ws.count, nullptr);
  }
  DecodeArgs args(int max_pages, void* stream = nullptr) {
    return make_decode_args(q.ptr, block_table.ptr, max_pages, seqlens.ptr, out.ptr, lse.ptr, ws.ptr, ws.count,
                            stream);
  }
};

struct CheckCase {
  int heads = 16;
  int q_len = 1;
  std::vector<int32_t> seqlens;
  Policy policy = Policy::kWorkList;
  int num_ctas = 0;
  int static_splits = 0;
  bool causal = true;
  uint64_t seed = 1;
  int spare_pages = 3;  // NaN pages shuffled among the used ones (a large count grows the cache)
  int d_qk = 576;       // 576, or 512 (no rope part)
  int page_size = 64;   // powers of two 1..256
  bool fp8 = false;     // e4m3 cache (scale 2^-8); the reference runs on the dequantised cache
  bool fp8_q = false;   // with fp8 / fp8_block: Q given in e4m3 with one power-of-two scale (the reference on
                        // its values; fp8_block: the latent part, the rope part in bf16 as q_pe)
  // fp8 cache with per-block scales (656-byte tokens; d_qk 576): each token's groups of 128
  // values first multiplied by 2^-k, k in 0..3 by a hash of (token, group), so that the
  // scales differ within a block and the running group maxima grow; the reference runs on
  // the decoded cache (power-of-two scales: exact in bf16).
  bool fp8_block = false;
  // With fp8_block: scales of any value (amax / 448) instead of powers of two; the
  // reference's cache is then the decoded values rounded to bf16 (2^-9 relative, well
  // below the e4m3 errors the bars allow).
  bool fp8_block_any_scales = false;
  double scale = 0.0;                    // softmax scale (0: 1 / sqrt(192), Kimi K3's)
  int batch_invariant_split_blocks = 0;  // PlanOptions' (0: balanced splits)
};

struct CheckResult {
  ref::Comparison cmp;
  uint32_t device_errors = 0;
  DecodePath path;  // what the call ran (describe_decode), which sets its accuracy bars
  // The call's outputs as they came back, and its workspace's CombineSync after the call
  // (work_format.hpp; init_workspace ran just before the call).
  std::vector<ref::Bf16> out;
  std::vector<float> lse;
  CombineSync sync_before{}, sync_after{};
};

inline CombineSync read_combine_sync(const void* ws) {
  CombineSync s{};
  cuda_ok(cudaMemcpy(&s, static_cast<const uint8_t*>(ws) + kCombineSyncOffset, sizeof s, cudaMemcpyDeviceToHost),
          "read CombineSync");
  return s;
}

inline std::string describe(const CheckCase& c) {
  std::ostringstream os;
  os << policy_name(c.policy) << " heads " << c.heads << " q_len " << c.q_len << " batch " << c.seqlens.size()
     << " ctas " << c.num_ctas << (c.causal ? "" : " non-causal") << (c.d_qk != 576 ? " d_qk 512" : "")
     << (c.page_size != 64 ? " page " + std::to_string(c.page_size) : std::string()) << (c.fp8 ? " fp8" : "")
     << (c.fp8_q ? " e4m3-q" : "") << (c.fp8_block ? " fp8-block" : "") << (c.fp8_block_any_scales ? " any-scales" : "")
     << " seqlens";
  for (size_t i = 0; i < c.seqlens.size() && i < 8; ++i) os << " " << c.seqlens[i];
  if (c.seqlens.size() > 8) os << " ...";
  return os.str();
}

// The decode's bf16 output and LSE on the device against the float64 reference.
inline ref::Comparison compare_with_reference(const ref::Problem& p, const ref::Outputs& expect,
                                              const std::vector<ref::Bf16>& got_out, const std::vector<float>& got_lse) {
  std::vector<double> o(got_out.size()), l(got_lse.size());
  for (size_t i = 0; i < o.size(); ++i) o[i] = ref::bf16_to_float(got_out[i]);
  for (size_t i = 0; i < l.size(); ++i) l[i] = got_lse[i];
  return ref::compare(p, expect, o, l);
}
inline ref::Comparison compare_with_reference(const ref::Problem& p, const ref::Outputs& expect,
                                              const DeviceArray<ref::Bf16>& out, const DeviceArray<float>& lse) {
  return compare_with_reference(p, expect, out.download(), lse.download());
}

// A case's data: the random problem with the reference's view of it (the cache and Q as
// the kernel's formats decode them), the cache and Q in those formats, their scales, and the
// plan's configuration and options.
struct PreparedCase {
  ref::RandomProblem<ref::Bf16> data;
  std::vector<uint8_t> cache8;  // fp8 / fp8_block: the cache as the kernel reads it
  std::vector<uint8_t> q8;      // fp8_q: Q in e4m3 (fp8_block: its latent part, 512 bytes a row)
  std::vector<ref::Bf16> q_rope;  // fp8_q with fp8_block: the rope part, 64 bf16 a row (q_pe)
  float kv_scale = 1.f / 256.f;
  float q_scale = 1.f;
  DecodeConfig config;
  PlanOptions options;
};

inline PreparedCase prepare_case(const CheckCase& c) {
  ref::Problem shape;
  shape.batch = int(c.seqlens.size());
  shape.q_len = c.q_len;
  shape.heads = c.heads;
  shape.causal = c.causal;
  shape.scale = c.scale > 0 ? c.scale : 1.0 / std::sqrt(192.0);
  shape.page_size = c.page_size;
  shape.d_qk = c.d_qk;
  PreparedCase pc;
  // The library's own checks of the configuration first (e.g. the per-block cache's d_qk
  // 576), before the cache is encoded in its format.
  DecodeConfig& config = pc.config;
  config.heads = c.heads;
  config.q_len = c.q_len;
  config.causal = c.causal;
  config.d_qk = c.d_qk;
  config.page_size = c.page_size;
  config.kv_dtype = c.fp8_block ? KvDtype::kFp8E4m3PerBlock : c.fp8 ? KvDtype::kFp8E4m3 : KvDtype::kBFloat16;
  config.softmax_scale = float(shape.scale);
  validate_config(config);
  pc.data = ref::make_random_problem<ref::Bf16>(shape, c.seqlens, c.seed, c.spare_pages);
  auto& data = pc.data;
  // fp8: the cache as e4m3 of value / 2^-8 (NaN poison stays NaN), and the reference's
  // cache replaced by the dequantised values (exact in bf16).
  const float kv_scale = pc.kv_scale;
  std::vector<uint8_t>& cache8 = pc.cache8;
  if (c.fp8) {
    cache8.resize(data.cache.size());
    for (size_t i = 0; i < cache8.size(); ++i) {
      cache8[i] = ref::float_to_e4m3(ref::bf16_to_float(data.cache[i]) / kv_scale);
      data.cache[i] = ref::float_to_bf16(ref::e4m3_to_float(cache8[i]) * kv_scale);
    }
  }

  if (c.fp8_block) {
    const size_t tokens = data.cache.size() / 576;
    cache8.resize(tokens * ref::kFp8BlockTokenBytes);
    std::vector<float> v(576);
    for (size_t t = 0; t < tokens; ++t) {
      for (int d = 0; d < 576; ++d) v[d] = ref::bf16_to_float(data.cache[t * 576 + d]);
      for (int g = 0; g < ref::kFp8BlockGroups; ++g) {
        const int k = -int(((t * 2654435761u) ^ (g * 40503u)) % 4);
        for (int i = 0; i < ref::kFp8BlockGroupSize; ++i) v[g * ref::kFp8BlockGroupSize + i] *= std::ldexp(1.f, k);
      }
      uint8_t* token = cache8.data() + t * ref::kFp8BlockTokenBytes;
      ref::encode_fp8_block_token(v.data(), v.data() + 512, token, /*power_of_two_scales=*/!c.fp8_block_any_scales);
      ref::decode_fp8_block_token(token, v.data());
      for (int d = 0; d < 576; ++d) data.cache[t * 576 + d] = ref::float_to_bf16(v[d]);
    }
  }

  // e4m3 Q: one scale, a power of two so that e4m3 x scale is exact in the reference's
  // bf16 Q; the largest |q| maps to at most 448.
  float& q_scale = pc.q_scale;
  std::vector<uint8_t>& q8 = pc.q8;
  // The per-block cache: the latent part only (columns < 512 of each 576), the rope part
  // stays bf16 in its own tensor.
  if (c.fp8_q) {
    const size_t cols = size_t(c.d_qk), e4m3_cols = c.fp8_block ? 512 : cols, rows = data.q.size() / cols;
    float amax = 0.f;
    for (size_t i = 0; i < data.q.size(); ++i) {
      if (i % cols < e4m3_cols) amax = std::fmax(amax, std::fabs(ref::bf16_to_float(data.q[i])));
    }
    q_scale = amax > 0.f ? std::ldexp(1.f, int(std::ceil(std::log2(amax / 448.f)))) : 1.f;
    q8.resize(rows * e4m3_cols);
    if (c.fp8_block) pc.q_rope.resize(rows * (cols - e4m3_cols));
    for (size_t r = 0; r < rows; ++r) {
      for (size_t j = 0; j < cols; ++j) {
        ref::Bf16& v = data.q[r * cols + j];
        if (j >= e4m3_cols) {
          pc.q_rope[r * (cols - e4m3_cols) + j - e4m3_cols] = v;
          continue;
        }
        uint8_t& e = q8[r * e4m3_cols + j];
        e = ref::float_to_e4m3(ref::bf16_to_float(v) / q_scale);
        v = ref::float_to_bf16(ref::e4m3_to_float(e) * q_scale);
      }
    }
  }

  PlanOptions& options = pc.options;
  options.policy = c.policy;
  options.num_ctas = c.num_ctas;
  options.static_splits = c.static_splits;
  options.batch_invariant_split_blocks = c.batch_invariant_split_blocks;
  return pc;
}

// The case's decode on the GPU (outputs and workspace NaN-poisoned first) against the
// float64 reference. Throws std::runtime_error on a CUDA error, kbmla::Error on an
// argument the library rejects.
// `pc` is prepare_case(c), `expected` the reference on it (made once for the emulation and
// the GPU run by `kbmla check`).
inline CheckResult run_gpu_case(const CheckCase& c, const PreparedCase& pc, const ref::Outputs& expected) {
  const auto& data = pc.data;
  const ref::Problem& p = data.problem;
  const DecodeConfig& config = pc.config;
  DevicePlan plan = DevicePlan::create(config, c.seqlens, pc.options);

  DeviceProblem dev(data, plan);
  dev.out.poison();
  dev.lse.poison();
  dev.ws.poison();
  init_workspace(dev.ws.ptr, dev.ws.count, nullptr);
  DeviceArray<uint8_t> dev_cache8(pc.cache8);
  DeviceArray<float> dev_kv_scale(std::vector<float>{pc.kv_scale});
  KvCache kv(c.fp8 || c.fp8_block ? static_cast<const void*>(dev_cache8.ptr) : dev.cache.ptr, p.num_pages,
             c.page_size, c.d_qk,
             config.kv_dtype);
  DecodeArgs args = dev.args(p.max_pages);
  if (c.fp8) args.kv_scale = dev_kv_scale.ptr;
  DeviceArray<uint8_t> dev_q8(pc.q8);
  DeviceArray<ref::Bf16> dev_q_rope(pc.q_rope);
  DeviceArray<float> dev_q_scale(std::vector<float>{pc.q_scale});
  if (c.fp8_q) {
    args.q = dev_q8.ptr;
    if (c.fp8_block) args.q_pe = dev_q_rope.ptr;
    args.q_dtype = QDtype::kFp8E4m3;
    args.q_scale = dev_q_scale.ptr;
  }
  CheckResult r;
  r.path = describe_decode(plan, kv, args.q_dtype);
  r.sync_before = read_combine_sync(dev.ws.ptr);
  decode(plan, kv, args);
  r.device_errors = read_device_errors(dev.ws.ptr, nullptr);
  cuda_ok(cudaDeviceSynchronize(), "decode");
  r.sync_after = read_combine_sync(dev.ws.ptr);
  r.out = dev.out.download();
  r.lse = dev.lse.download();

  r.cmp = compare_with_reference(p, expected, r.out, r.lse);
  return r;
}
inline CheckResult run_gpu_case(const CheckCase& c) {
  const PreparedCase pc = prepare_case(c);
  return run_gpu_case(c, pc, ref::reference_decode(pc.data.problem, pc.data.inputs()));
}

// The CPU emulation of the case's work-list plan over `num_ctas` CTAs (the splits and
// their merge in float64, on the values the kernel sees) against `expected`, the float64
// reference on them:
// equal to rounding (<= 1e-12) when the plan's items cover every key once.
inline ref::Comparison emulate_case(const PreparedCase& pc, const ref::Outputs& expected, int num_ctas,
                                    HostPlan* plan_out = nullptr) {
  const ref::Problem& p = pc.data.problem;
  PlanShape shape = decode_plan_shape(pc.config, p.batch, pc.options);
  shape.num_ctas = num_ctas;
  const std::vector<int32_t> seqlens(pc.data.seqlens.begin(), pc.data.seqlens.end());
  HostPlan plan = make_host_plan(shape, seqlens);
  const ref::Outputs got = ref::emulate_split_decode(p, pc.data.inputs(), plan);
  if (plan_out != nullptr) *plan_out = std::move(plan);
  return ref::compare(p, expected, got.out, got.lse);
}

}  // namespace kbmla::check
