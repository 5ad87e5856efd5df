#include "src/plan/device_planner.hpp"

#include "kbmla/error.hpp"

namespace kbmla {

namespace {

// One warp per probe, and one more for the extra fill of first_fitting_with.
constexpr int kPlannerWarps = kCapProbes + 1;
static_assert(kPlannerWarps * 32 <= 1024, "one warp per probe in one CTA");
static_assert(sizeof(plan_detail::RequestTerms) == 64, "the staged batch size assumes 64-byte terms");

// The K probes of a search round, one per warp (lanes of one warp would diverge on every
// piece decision and run serially: measured, 775 us for batch 128): lane 0 of warp i
// evaluates probe i with its counts, the lowest warp that fits wins. Every thread keeps the
// same search state, so all call this the same number of times.
struct BlockProbes {
  int* verdict;         // shared, kPlannerWarps entries
  PlanCounts* counted;  // shared, kPlannerWarps entries: each probe's counts
  uint8_t* scratch;     // shared, kScratchBytes, 16-byte aligned: single()'s result
  static constexpr int kScratchBytes = 128;

  // Thread 0 runs the sequential steps (the total) alone: with every warp running them, one
  // copy of a dependent chain per warp shared the SM's four schedulers.
  template <class F>
  __device__ auto single(F&& f) const {
    using T = decltype(f());
    static_assert(sizeof(T) <= kScratchBytes, "single(): result too large for the scratch");
    if (threadIdx.x == 0) {
      const T v = f();
      memcpy(scratch, &v, sizeof(T));
    }
    __syncthreads();
    T v;
    memcpy(&v, scratch, sizeof(T));
    __syncthreads();
    return v;
  }

  // extra_cap >= 0: warp kCapProbes fills at it in the same round (the tight bound, the
  // whole form's limit: a pass fewer on the planner's critical path than a fill of its own).
  template <class Fits>
  __device__ int round(const CapSearch& s, Fits& fits, int64_t extra_cap, PlanCounts& winner, bool* extra_fits,
                       PlanCounts* extra) const {
    const int warp = int(threadIdx.x / 32);
    if (threadIdx.x % 32 == 0) {
      if (warp < kCapProbes) {
        verdict[warp] = fits(s.probe(warp), counted[warp]) ? 1 : 0;
      } else if (extra_cap >= 0) {
        verdict[warp] = fits(extra_cap, counted[warp]) ? 1 : 0;
      }
    }
    __syncthreads();
    int first = kCapProbes;
    for (int i = kCapProbes - 1; i >= 0; --i) {
      if (verdict[i]) first = i;
    }
    if (first < kCapProbes) winner = counted[first];
    if (extra_fits != nullptr) {
      *extra_fits = verdict[kCapProbes] != 0;
      *extra = counted[kCapProbes];
    }
    __syncthreads();
    return first;
  }
  template <class Fits>
  __device__ int first_fitting(const CapSearch& s, Fits& fits, PlanCounts& winner) const {
    return round(s, fits, -1, winner, nullptr, nullptr);
  }
  template <class Fits>
  __device__ int first_fitting_with(const CapSearch& s, Fits& fits, int64_t extra_cap, RoundWhen, bool& extra_fits,
                                    PlanCounts& extra, PlanCounts& winner) const {
    return round(s, fits, extra_cap, winner, &extra_fits, &extra);
  }
};

constexpr int kSmemSeqlens = 12 * 1024;  // 48 KiB of seqlens staged in shared memory
// Batches up to this size also stage each request's fill terms (plan_detail::RequestTerms,
// 64 bytes): every pass of every probe then reads them instead of recomputing them from the
// seqlen (a division by the block size and 64-bit products per request and pass, on the one
// thread whose chain sets the planner's time).
constexpr int kStagedTermsBatch = 3072;
constexpr size_t kStagedTermsBytes = size_t(kStagedTermsBatch) * (sizeof(plan_detail::RequestTerms) + sizeof(int32_t));

// kCapProbes warps search the cap (one probe each per round, one more warp for an extra
// fill); thread 0 then writes the plan. On any failure the plan is left empty but
// well-formed: every slot's column starts with a negative entry. 17 warps, so the fill may
// keep 120 registers (with 32 warps it had 64 and spilled once the whole-request form was
// added).
__global__ void __launch_bounds__(kPlannerWarps * 32, 1) device_planner_kernel(const __grid_constant__ PlanShape shape,
                                                             const int32_t* seqlens_global,
                                                             const __grid_constant__ DevicePlanBuffers out) {
  extern __shared__ uint4 staged_words[];  // (16-byte aligned)
  uint8_t* staged_bytes = reinterpret_cast<uint8_t*>(staged_words);
  __shared__ int verdict[kPlannerWarps];
  __shared__ PlanCounts counted[kPlannerWarps];
  __shared__ alignas(16) uint8_t scratch[BlockProbes::kScratchBytes];
  const BlockProbes probes{verdict, counted, scratch};
  PlanCounts counts;
  int status;
  PlanBuffers buffers = out.plan;
  if (shape.batch <= kStagedTermsBatch) {
    auto* terms = reinterpret_cast<plan_detail::RequestTerms*>(staged_bytes);
    auto* seqlens = reinterpret_cast<int32_t*>(terms + shape.batch);
    const int T = plan_detail::ceil_div(shape.heads * shape.q_len, shape.tile_rows);
    for (int b = threadIdx.x; b < shape.batch; b += blockDim.x) {
      seqlens[b] = seqlens_global[b];
      terms[b] = plan_detail::request_terms(shape, seqlens[b], T, /*staged=*/true);
    }
    __syncthreads();
    const plan_detail::StagedRequests reqs{seqlens, terms};
    counts = plan_measure_requests(shape, reqs, probes);
    if (threadIdx.x != 0) return;
    status = counts.status;
    if (status == kPlanOk) status = plan_write_requests(shape, reqs, counts, buffers);
  } else {
    const int32_t* seqlens = seqlens_global;
    if (shape.batch <= kSmemSeqlens) {
      auto* staged = reinterpret_cast<int32_t*>(staged_bytes);
      for (int b = threadIdx.x; b < shape.batch; b += blockDim.x) staged[b] = seqlens_global[b];
      __syncthreads();
      seqlens = staged;
    }
    counts = plan_measure_with(shape, seqlens, probes);
    if (threadIdx.x != 0) return;
    status = counts.status;
    if (status == kPlanOk) status = plan_write(shape, seqlens, counts, buffers);
  }
  DevicePlanHeader h{};  // (thread 0 only from here)
  h.status = status;
  h.bad_index = counts.bad_index;
  if (status != kPlanOk) {
    const int G = shape.num_ctas / shape.cluster_size;
    for (int g = 0; g < G && g < buffers.work_list_capacity; ++g) buffers.work_list[g] = kNoWork;
    for (int b = 0; b < shape.batch; ++b) buffers.num_splits[b] = 0;
    *out.header = h;
    return;
  }
  int n = 0;
  for (int wide = 1; wide >= 0; --wide) {
    for (int b = 0; b < shape.batch; ++b) {
      const int ns = buffers.num_splits[b];
      if (ns > 1 && (ns > kCombineNarrowSplits) == bool(wide) && n < out.split_requests_capacity) {
        out.split_requests[n++] = b;
      }
    }
    if (wide) h.num_wide_requests = n;
  }
  h.num_split_requests = n;
  h.num_zero_fill = counts.num_zero_fill;
  h.num_slots = counts.num_slots;
  h.num_items = counts.num_items;
  *out.header = h;
}

}  // namespace

void launch_device_planner(const PlanShape& shape, const int32_t* seqlens, const DevicePlanBuffers& out,
                           cudaStream_t stream) {
  require(shape.fixed_grid, "device planner: the shape must use the fixed-grid form");
  static const cudaError_t attr_err = cudaFuncSetAttribute(
      device_planner_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kStagedTermsBytes));
  require(attr_err == cudaSuccess, "device planner: cannot reserve ", kStagedTermsBytes, " bytes of shared memory: ",
          cudaGetErrorString(attr_err));
  const size_t smem = shape.batch <= kStagedTermsBatch
                          ? size_t(shape.batch) * (sizeof(plan_detail::RequestTerms) + sizeof(int32_t))
                          : shape.batch <= kSmemSeqlens ? size_t(shape.batch) * sizeof(int32_t)
                                                        : 0;
  device_planner_kernel<<<1, kPlannerWarps * 32, smem, stream>>>(shape, seqlens, out);
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "device planner: launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla
