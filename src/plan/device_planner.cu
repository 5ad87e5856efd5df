#include "src/plan/device_planner.hpp"

#include "kbmla/error.hpp"

namespace kbmla {

namespace {

static_assert(kCapProbes * 32 <= 1024, "one warp per probe in one CTA");

// The K probes of a search round, one per warp (lanes of one warp would diverge on every
// piece decision and run serially: measured, 775 us for batch 128): lane 0 of warp i
// evaluates probe i, the lowest warp that fits wins. Every thread keeps the same search
// state, so all call this the same number of times.
struct BlockProbes {
  int* verdict;       // shared, kCapProbes entries
  uint8_t* scratch;   // shared, kScratchBytes, 16-byte aligned: single()'s result
  static constexpr int kScratchBytes = 128;

  // Thread 0 runs the sequential steps (the total, the tight-bound probe, the count pass)
  // alone: with every warp running them, one copy of a dependent chain per warp shared the
  // SM's four schedulers.
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

  template <class Fits>
  __device__ int first_fitting(const CapSearch& s, Fits& fits) const {
    const int warp = int(threadIdx.x / 32);
    if (threadIdx.x % 32 == 0) verdict[warp] = fits(s.probe(warp)) ? 1 : 0;
    __syncthreads();
    int first = kCapProbes;
    for (int i = kCapProbes - 1; i >= 0; --i) {
      if (verdict[i]) first = i;
    }
    __syncthreads();
    return first;
  }
};

constexpr int kSmemSeqlens = 12 * 1024;  // 48 KiB of seqlens staged in shared memory

// kCapProbes warps search the cap (one probe each per round); thread 0 then counts and
// writes the plan. On any failure the plan is left empty but well-formed: every slot's
// column starts with a negative entry. 16 warps, so the fill may keep 128 registers (with
// 32 warps it had 64 and spilled once the whole-request form was added).
__global__ void __launch_bounds__(kCapProbes * 32, 1) device_planner_kernel(const __grid_constant__ PlanShape shape,
                                                             const int32_t* seqlens_global,
                                                             const __grid_constant__ DevicePlanBuffers out) {
  extern __shared__ int32_t staged[];
  const int32_t* seqlens = seqlens_global;
  if (shape.batch <= kSmemSeqlens) {
    for (int b = threadIdx.x; b < shape.batch; b += blockDim.x) staged[b] = seqlens_global[b];
    __syncthreads();
    seqlens = staged;
  }
  __shared__ int verdict[kCapProbes];
  __shared__ alignas(16) uint8_t scratch[BlockProbes::kScratchBytes];
  DevicePlanHeader h{};
  PlanCounts counts = plan_measure_with(shape, seqlens, BlockProbes{verdict, scratch});
  if (threadIdx.x != 0) return;
  PlanBuffers buffers = out.plan;
  int status = counts.status;
  if (status == kPlanOk) status = plan_write(shape, seqlens, counts, buffers);
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
  const size_t smem = shape.batch <= kSmemSeqlens ? size_t(shape.batch) * sizeof(int32_t) : 0;
  device_planner_kernel<<<1, kCapProbes * 32, smem, stream>>>(shape, seqlens, out);
  const cudaError_t err = cudaGetLastError();
  require(err == cudaSuccess, "device planner: launch failed: ", cudaGetErrorString(err));
}

}  // namespace kbmla
