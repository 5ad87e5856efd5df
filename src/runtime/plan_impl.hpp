// The state behind a DevicePlan (decode_api.cpp builds it) and the per-plan choices the
// decode call makes from it (launch_choices.cpp).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kbmla/decode.hpp"
#include "src/combine/combine.hpp"
#include "src/plan/device_planner.hpp"
#include "src/runtime/tensor_maps.hpp"
#include "src/sm90/decode/kernel.hpp"

namespace kbmla {

struct DevicePlan::Impl {
  DecodeConfig config;
  PlanOptions options;
  HostPlan host;
  std::vector<int32_t> split_requests;  // wide (> kCombineNarrowSplits splits) first, then narrow
  int num_wide_requests = 0;
  int max_wide_splits = 0;    // the most splits of a wide request (the combine's block size)
  int device_sm_count = 0;    // SMs of the device the plan was made on (the combine's spread)
  int32_t* device = nullptr;  // one allocation holding every array below
  const int32_t* work_list = nullptr;
  SplitTableView splits{};
  const int32_t* zero_fill = nullptr;
  const int32_t* split_requests_dev = nullptr;
  // Device-made plans.
  bool device_planned = false;
  PlanCapacity capacity{};
  DevicePlanHeader* header = nullptr;
  DevicePlanBuffers buffers{};
  mutable detail::QMapCache q_maps;  // the last Q maps (see q_maps_for, fp8_q_maps_for)
  ~Impl() {
    if (device != nullptr) cudaFree(device);
  }
};

namespace detail {

// Whether the decode gathers the cache's pages row by row (cp.async) instead of by TMA
// (DecodeParams::gather_rows), by cache dtype and page size.
bool gathers_rows(const DecodeConfig& c);

// Work items of the busiest CTA (2-CTA cluster) of the plan; device-made plans: unknown on
// the host (INT_MAX).
int max_items_per_cta(const DevicePlan::Impl& P);

// Whether an fp8 kernel quantises a bf16 Q itself (q_inline_fp8.cuh) for a tile of `rows`
// query rows, instead of after the quantiser kernel (launch_choices.cpp says when and why).
bool fp8_quantises_q_in_kernel(const DevicePlan::Impl& P, int rows);

// Whether the per-tensor fp8 call stages its bf16 Q for the split-role kernel to quantise
// (DecodeParams::q_staged; launch_choices.cpp), taking precedence over the above.
bool fp8_stages_q_in_kernel(const DevicePlan::Impl& P);

// DevicePlan::create without the upload: the checks, the host plan and its split
// requests. num_ctas 0 asks the current device for its SMs; any other value needs no GPU.
std::unique_ptr<DevicePlan::Impl> make_host_impl(const DecodeConfig& config, std::span<const int32_t> seqlens,
                                                 const PlanOptions& options);

// How a call's Q reaches the decode kernel's S (decode_with_mode branches on it): the
// caller's bf16 or e4m3 rows, or e4m3 rows quantised per row by the quantiser kernel, by
// the decode's consumers (q_inline_fp8.cuh) or from bf16 rows staged by TMA (the split-role
// kernel's softmax warpgroup, q_staged_fp8.cuh). Checks q_dtype against the cache dtype.
enum class QPath { kBf16, kCallerE4m3, kQuantiserKernel, kInline, kStaged };
QPath choose_q_path(const DevicePlan::Impl& P, QDtype q_dtype);

// The DecodeParams fields that the kernel choice (sm90::choose_*_kernel) reads, set as the
// decode call sets them: rows, cluster size, d_qk, page size, the row gather.
sm90::DecodeParams kernel_choice_params(const DevicePlan::Impl& P);

// describe_decode without the device objects (decode_path.cpp).
DecodePath describe_decode(const DevicePlan::Impl& P, QDtype q_dtype);

// The plan's split requests for the combine (DevicePlan::Impl::split_requests: wide ones,
// of more than kCombineNarrowSplits splits, first), from the host plan's split counts.
void record_split_requests(DevicePlan::Impl& P);

// What the combine takes from the plan (the per-call pointers are the caller's to add).
CombineParams combine_plan_params(const DevicePlan::Impl& P);

// Whether a full decode of this plan with its combine takes early merges (combine.hpp;
// launch_choices.cpp says when); `cp`: combine_plan_params(P).
bool early_merges_wanted(const DevicePlan::Impl& P, const CombineParams& cp);

}  // namespace detail
}  // namespace kbmla
